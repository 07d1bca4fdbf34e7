//! Unit tests of the machine rules, one rule per test.

use std::time::Duration;

use super::*;
use crate::model::{InstanceCurrentStatus, InstanceStatus, ObjectMeta};
use crate::ports::cloud::InstanceState;

fn instance(name: &str, phase: &str, created: i64, provider_id: Option<&str>) -> Instance {
    let mut meta = ObjectMeta {
        name: Some(name.into()),
        labels: [
            (keys::LABEL_NODE_GROUP.to_owned(), "worker".to_owned()),
            (keys::LABEL_TOPOLOGY_ZONE.to_owned(), "a".to_owned()),
        ]
        .into(),
        creation_timestamp: Some(Timestamp::from_secs(created).to_rfc3339()),
        ..ObjectMeta::default()
    };
    if let Some(id) = provider_id {
        meta.annotations
            .insert(ANNOTATION_PROVIDER_ID.into(), id.into());
    }
    Instance {
        metadata: meta,
        status: InstanceStatus {
            current_status: Some(InstanceCurrentStatus {
                phase: Some(phase.into()),
                last_update_time: None,
            }),
            ..InstanceStatus::default()
        },
        ..Instance::default()
    }
}

fn machine(name: &str, launched: i64) -> CloudInstance {
    CloudInstance {
        provider_id: format!("sim:///a/{name}"),
        instance_id: format!("i-{name}"),
        group: "worker".into(),
        zone: "a".into(),
        machine: name.into(),
        state: InstanceState::Running,
        launched: Some(Timestamp::from_secs(launched)),
    }
}

fn node(name: &str, provider_id: &str, ready: bool, created: i64) -> Node {
    Node {
        name: name.into(),
        ready,
        provider_id: Some(provider_id.into()),
        created: Some(Timestamp::from_secs(created)),
        ..Node::default()
    }
}

struct World {
    instances: Vec<Instance>,
    cloud: Vec<CloudInstance>,
    absent: BTreeSet<String>,
    nodes: Vec<Node>,
}

impl World {
    fn new() -> Self {
        Self {
            instances: Vec::new(),
            cloud: Vec::new(),
            absent: BTreeSet::new(),
            nodes: Vec::new(),
        }
    }

    fn plan(&self, m: &mut Machines, requests: &MachineRequests, now: i64) -> Vec<MachineCommand> {
        m.step(
            &MachineSnapshot {
                instances: &self.instances,
                cloud: &self.cloud,
                absent: &self.absent,
                nodes: &self.nodes,
            },
            requests,
            Timestamp::from_secs(now),
        )
        .commands
    }
}

fn config() -> MachineConfig {
    MachineConfig {
        creation_timeout: Duration::from_secs(600),
        ..MachineConfig::default()
    }
}

#[test]
fn names_have_the_deckhouse_shape_and_differ() {
    let a = machine_name("worker", "eu-1a", 1);
    let b = machine_name("worker", "eu-1a", 2);
    assert_ne!(a, b);
    let parts: Vec<&str> = a.rsplitn(3, '-').collect();
    assert_eq!(parts[2], "worker");
    assert_eq!(parts[1].len(), 5);
    assert_eq!(parts[0].len(), 5);
    assert_eq!(
        machine_name("worker", "eu-1a", 1).split('-').nth(1),
        machine_name("worker", "eu-1a", 9).split('-').nth(1),
        "the hash names the zone"
    );
}

#[test]
fn a_requested_machine_is_created_asked_again_until_listed_then_follows_its_node() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    let requests = MachineRequests {
        create: vec![("worker".into(), "a".into(), 1)],
        ..MachineRequests::default()
    };
    let commands = w.plan(&mut m, &requests, 0);
    let [
        MachineCommand::Create {
            machine: name,
            client_token: token,
            ..
        },
    ] = &commands[..]
    else {
        panic!("{commands:?}");
    };
    assert_eq!(token, &client_token(name));
    let name = name.clone();
    w.instances.push(instance(&name, "Pending", 0, None));
    // Not listed yet: asked again (same token) only after retry_initial.
    assert!(w.plan(&mut m, &MachineRequests::default(), 5).is_empty());
    let commands = w.plan(&mut m, &MachineRequests::default(), 10);
    assert!(
        matches!(&commands[..], [MachineCommand::EnsureMachine { machine, client_token: t, .. }] if *machine == name && *t == client_token(&name)),
        "{commands:?}"
    );
    // Listed: Provisioning with its provider ID.
    w.cloud.push(machine(&name, 11));
    let commands = w.plan(&mut m, &MachineRequests::default(), 12);
    assert!(
        matches!(
            &commands[..],
            [MachineCommand::SetPhase {
                phase: MachinePhase::Provisioning,
                provider_id: Some(_),
                ..
            }]
        ),
        "{commands:?}"
    );
    w.instances[0] = instance(&name, "Provisioning", 0, Some(&format!("sim:///a/{name}")));
    assert!(w.plan(&mut m, &MachineRequests::default(), 13).is_empty());
    // Its Node registers: Running.
    w.nodes
        .push(node(&name, &format!("sim:///a/{name}"), true, 60));
    let commands = w.plan(&mut m, &MachineRequests::default(), 61);
    assert!(
        matches!(&commands[..], [MachineCommand::SetPhase { phase: MachinePhase::Running, node: Some(n), .. }] if *n == name),
        "{commands:?}"
    );
}

#[test]
fn failed_create_calls_back_off() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    w.instances
        .push(instance("worker-aaaaa-00001", "Pending", 0, None));
    assert_eq!(w.plan(&mut m, &MachineRequests::default(), 0).len(), 1);
    let error = CloudError::throttled("slow down");
    m.handle_create("worker-aaaaa-00001", Err(&error), Timestamp::from_secs(0));
    m.handle_create("worker-aaaaa-00001", Err(&error), Timestamp::from_secs(0));
    // Two failures: 20 s.
    assert!(w.plan(&mut m, &MachineRequests::default(), 19).is_empty());
    assert_eq!(w.plan(&mut m, &MachineRequests::default(), 20).len(), 1);
}

#[test]
fn a_machine_without_a_node_in_time_is_recorded_and_replaced() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    let id = "sim:///a/worker-aaaaa-00001";
    w.instances
        .push(instance("worker-aaaaa-00001", "Provisioning", 0, Some(id)));
    w.cloud.push(machine("worker-aaaaa-00001", 1));
    assert!(w.plan(&mut m, &MachineRequests::default(), 599).is_empty());
    let commands = w.plan(&mut m, &MachineRequests::default(), 600);
    assert!(
        matches!(
            &commands[..],
            [
                MachineCommand::RecordFailure { group, message, .. },
                MachineCommand::SetPhase { phase: MachinePhase::Terminating, .. },
                MachineCommand::DeleteMachine { reason: DeleteReason::CreationTimedOut, .. },
            ] if group == "worker" && message.contains("no Node registered within 600 s")
        ),
        "{commands:?}"
    );
    // Gone from the cloud: the Instance goes (the scaling layer orders a replacement).
    w.instances[0] = instance("worker-aaaaa-00001", "Terminating", 0, Some(id));
    w.cloud.clear();
    let commands = w.plan(&mut m, &MachineRequests::default(), 620);
    assert_eq!(
        commands,
        [MachineCommand::ForgetInstance {
            machine: "worker-aaaaa-00001".into()
        }]
    );
}

#[test]
fn removals_and_deleted_instances_delete_the_machine_then_node_and_instance() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    let id = "sim:///a/worker-aaaaa-00001";
    w.instances
        .push(instance("worker-aaaaa-00001", "Running", 0, Some(id)));
    w.cloud.push(machine("worker-aaaaa-00001", 1));
    w.nodes.push(node("worker-aaaaa-00001", id, true, 60));
    let requests = MachineRequests {
        remove: ["worker-aaaaa-00001".to_owned()].into(),
        ..MachineRequests::default()
    };
    let commands = w.plan(&mut m, &requests, 100);
    assert!(
        matches!(
            &commands[..],
            [
                MachineCommand::SetPhase {
                    phase: MachinePhase::Terminating,
                    ..
                },
                MachineCommand::DeleteMachine {
                    reason: DeleteReason::ScaledDown,
                    ..
                }
            ]
        ),
        "{commands:?}"
    );
    // No Node deletion while the machine exists; deletes repeat at the pace.
    w.instances[0] = instance("worker-aaaaa-00001", "Terminating", 0, Some(id));
    assert!(w.plan(&mut m, &MachineRequests::default(), 105).is_empty());
    m.handle_delete("worker-aaaaa-00001", Ok(()), Timestamp::from_secs(105));
    let commands = w.plan(&mut m, &MachineRequests::default(), 115);
    assert!(
        matches!(&commands[..], [MachineCommand::DeleteMachine { .. }]),
        "{commands:?}"
    );
    w.cloud.clear();
    let commands = w.plan(&mut m, &MachineRequests::default(), 120);
    assert!(
        matches!(&commands[..], [MachineCommand::DeleteNode { node, .. }, MachineCommand::ForgetInstance { .. }] if node == "worker-aaaaa-00001"),
        "{commands:?}"
    );

    // A deleted Instance deletes its machine too.
    let mut w = World::new();
    let mut deleted = instance("worker-aaaaa-00002", "Running", 0, None);
    deleted.metadata.deletion_timestamp = Some(Timestamp::from_secs(5).to_rfc3339());
    w.instances.push(deleted);
    w.cloud.push(machine("worker-aaaaa-00002", 1));
    let commands = w.plan(&mut m, &MachineRequests::default(), 200);
    assert!(
        commands.iter().any(|c| matches!(
            c,
            MachineCommand::DeleteMachine {
                reason: DeleteReason::InstanceDeleted,
                ..
            }
        )),
        "{commands:?}"
    );
}

#[test]
fn a_vanished_machine_is_a_failure_and_its_node_goes() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    let id = "sim:///a/worker-aaaaa-00001";
    w.instances
        .push(instance("worker-aaaaa-00001", "Running", 0, Some(id)));
    w.nodes.push(node("worker-aaaaa-00001", id, false, 60));
    let commands = w.plan(&mut m, &MachineRequests::default(), 100);
    assert!(
        matches!(&commands[..], [
            MachineCommand::RecordFailure { message, .. },
            MachineCommand::DeleteNode { .. },
            MachineCommand::ForgetInstance { .. },
        ] if message.contains("disappeared")),
        "{commands:?}"
    );
}

#[test]
fn a_machine_never_seen_listed_whose_node_registered_is_not_asked_for_again() {
    // The Instance never got past Pending (its phase writes failed), yet its machine booted,
    // registered a Node and was then terminated before the controller saw it listed.
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    let name = "worker-aaaaa-00001";
    let id = "sim:///a/i-first";
    w.instances.push(instance(name, "Pending", 0, None));
    w.nodes.push(node(name, id, true, 60));
    // The Node is still Ready (its machine's end not confirmed): wait, no second machine.
    assert!(
        w.plan(&mut m, &MachineRequests::default(), 100).is_empty(),
        "a name whose machine registered a Node is not asked for again"
    );
    // Not Ready, and the cloud confirms the provider ID is gone: a vanished machine.
    w.nodes[0].ready = false;
    assert!(w.plan(&mut m, &MachineRequests::default(), 110).is_empty());
    w.absent.insert(id.to_owned());
    let commands = w.plan(&mut m, &MachineRequests::default(), 120);
    assert!(
        matches!(&commands[..], [
            MachineCommand::RecordFailure { message, provider_id: Some(p), .. },
            MachineCommand::DeleteNode { node, .. },
            MachineCommand::ForgetInstance { machine },
        ] if message.contains("disappeared") && p == id && node == name && machine == name),
        "{commands:?}"
    );
}

#[test]
fn a_stale_node_of_an_earlier_machine_of_the_name_is_not_the_machines_node() {
    // A second machine under the same name (a cloud that forgot the client token) is listed;
    // the Node of the name is the first machine's, gone from the cloud.
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    let name = "worker-aaaaa-00001";
    let second = machine(name, 100);
    w.instances
        .push(instance(name, "Provisioning", 0, Some(&second.provider_id)));
    w.cloud.push(second);
    w.nodes.push(node(name, "sim:///a/i-first", false, 60));
    w.absent.insert("sim:///a/i-first".to_owned());
    let commands = w.plan(&mut m, &MachineRequests::default(), 200);
    assert!(
        matches!(&commands[..], [MachineCommand::DeleteNode { node, reason }]
            if node == name && reason.contains("i-first")),
        "the stale Node is collected and the machine is not Running: {commands:?}"
    );
}

#[test]
fn orphans_are_deleted_after_their_grace() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    w.cloud.push(machine("worker-zzzzz-00009", 100));
    assert!(w.plan(&mut m, &MachineRequests::default(), 219).is_empty());
    let commands = w.plan(&mut m, &MachineRequests::default(), 220);
    assert!(
        matches!(
            &commands[..],
            [MachineCommand::DeleteMachine {
                reason: DeleteReason::Orphaned,
                ..
            }]
        ),
        "{commands:?}"
    );
}

#[test]
fn only_unready_old_nodes_the_cloud_does_not_know_are_collected() {
    let mut m = Machines::with_config(config());
    let mut w = World::new();
    w.nodes = vec![
        node("gone", "aws:///a/i-gone", false, 0),
        node("ready", "aws:///a/i-ready", true, 0),
        node("young", "aws:///a/i-young", false, 100),
        node("alive", "sim:///a/alive", false, 0),
        node("unknown", "aws:///a/i-unknown", false, 0),
    ];
    w.cloud.push(machine("alive", 0));
    w.absent = [
        "aws:///a/i-gone",
        "aws:///a/i-ready",
        "aws:///a/i-young",
        "sim:///a/alive",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    // The cloud machine "alive" has no Instance: it is an orphan, but old only at 120.
    let commands = w.plan(&mut m, &MachineRequests::default(), 150);
    let deleted: Vec<&str> = commands
        .iter()
        .filter_map(|c| match c {
            MachineCommand::DeleteNode { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["gone"], "{commands:?}");
}
