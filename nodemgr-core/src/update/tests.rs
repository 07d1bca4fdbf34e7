//! The update planner's unit tests and properties (safety, liveness, Deckhouse parity).

use super::*;
use std::collections::BTreeMap;

use crate::drain::Drain;
use crate::model::{ApprovalMode, Node, NodeGroup, NodeType, Pod, Timestamp, keys};
use crate::model::{
    AutomaticDisruptions, DisruptionWindow, Disruptions, IntOrString, NodeGroupStatus, ObjectMeta,
    RollingUpdateDisruptions, Update,
};
use crate::window::window_open;
use proptest::prelude::*;

const DESIRED: &str = "new";
const OLD: &str = "old";

fn group(name: &str, mode: ApprovalMode, max_concurrent: Option<IntOrString>) -> NodeGroup {
    let mut g = NodeGroup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..NodeGroup::default()
    };
    g.spec.disruptions = Some(Disruptions {
        approval_mode: Some(mode),
        ..Disruptions::default()
    });
    g.spec.update = max_concurrent.map(|m| Update {
        max_concurrent: Some(m),
    });
    g
}

fn node(name: &str, group: &str, checksum: Option<&str>, marks: &[(&str, &str)]) -> Node {
    let mut n = Node {
        name: name.into(),
        ready: true,
        ..Node::default()
    };
    n.labels.insert(keys::LABEL_NODE_GROUP.into(), group.into());
    if let Some(c) = checksum {
        n.annotations
            .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), c.into());
    }
    for (k, v) in marks {
        n.annotations.insert((*k).into(), (*v).into());
    }
    n
}

const W: (&str, &str) = (keys::ANNOTATION_WAITING_FOR_APPROVAL, "");
const A: (&str, &str) = (keys::ANNOTATION_APPROVED, "");
const DR: (&str, &str) = (keys::ANNOTATION_DISRUPTION_REQUIRED, "");
const DA: (&str, &str) = (keys::ANNOTATION_DISRUPTION_APPROVED, "");
const RU: (&str, &str) = (keys::ANNOTATION_ROLLING_UPDATE, "");
const DRAINING: (&str, &str) = (keys::ANNOTATION_DRAINING, "bashible");
const DRAINED: (&str, &str) = (keys::ANNOTATION_DRAINED, "bashible");
const DRAINED_USER: (&str, &str) = (keys::ANNOTATION_DRAINED, "user");

fn plan(group: &NodeGroup, nodes: &[Node]) -> UpdatePlan {
    let snapshot = GroupSnapshot {
        group,
        desired_checksum: DESIRED,
        nodes: nodes.iter().collect(),
    };
    plan_group_update(&snapshot, Timestamp::EPOCH)
}

fn approve(n: &str) -> UpdateCommand {
    UpdateCommand::Approve { node: n.into() }
}

#[test]
fn cloud_ephemeral_groups_move_only_when_desired_equals_ready() {
    let mut g = group("g", ApprovalMode::Automatic, None);
    g.spec.node_type = Some(NodeType::CloudEphemeral);
    let nodes = [
        node("a", "g", Some("old"), &[W]),
        node("b", "g", Some(DESIRED), &[]),
    ];
    let with_desired = |d: i64| {
        let mut g = g.clone();
        g.status = Some(NodeGroupStatus {
            desired: Some(d),
            ..NodeGroupStatus::default()
        });
        g
    };
    // Scaling up: a third machine is wanted but has not joined.
    let p = plan(&with_desired(3), &nodes);
    assert!(p.commands.is_empty(), "{:?}", p.commands);
    assert_eq!(
        p.blocked,
        vec!["group is scaling: status.desired is 3, 2 nodes are Ready".to_owned()]
    );
    // Whole: the waiting node is approved.
    assert_eq!(plan(&with_desired(2), &nodes).commands, vec![approve("a")]);
    // No status yet, or a status without `desired`: held until the status controller
    // counted the group (a cache lagging that write must not let the group through).
    for g in [g.clone(), {
        let mut g = g.clone();
        g.status = Some(NodeGroupStatus::default());
        g
    }] {
        let p = plan(&g, &nodes);
        assert!(p.commands.is_empty(), "{:?}", p.commands);
        assert_eq!(
            p.blocked,
            vec!["group is not counted yet: its status carries no desired".to_owned()]
        );
    }
    // Other node types are not gated by the desired count.
    let mut static_group = with_desired(3);
    static_group.spec.node_type = Some(NodeType::Static);
    assert_eq!(plan(&static_group, &nodes).commands, vec![approve("a")]);
}

#[test]
fn max_concurrent_resolves_integers_and_percentages() {
    let g = |m| group("g", ApprovalMode::Automatic, m);
    assert_eq!(max_concurrent(&g(None), 10), 1);
    assert_eq!(max_concurrent(&g(Some(IntOrString::Int(3))), 10), 3);
    assert_eq!(
        max_concurrent(&g(Some(IntOrString::String("3".into()))), 10),
        3
    );
    assert_eq!(
        max_concurrent(&g(Some(IntOrString::String("25%".into()))), 10),
        2
    );
    assert_eq!(
        max_concurrent(&g(Some(IntOrString::String("10%".into()))), 5),
        1
    );
    assert_eq!(
        max_concurrent(&g(Some(IntOrString::String("50%".into()))), 0),
        1
    );
    assert_eq!(max_concurrent(&g(Some(IntOrString::Int(0))), 4), 1);
    assert_eq!(max_concurrent(&g(Some(IntOrString::Int(-2))), 4), 1);
    assert_eq!(
        max_concurrent(&g(Some(IntOrString::String("x%".into()))), 4),
        1
    );
}

#[test]
fn approves_waiting_nodes_in_name_order_up_to_the_limit() {
    let g = group("g", ApprovalMode::Automatic, Some(IntOrString::Int(2)));
    let nodes = [
        node("c", "g", None, &[W]),
        node("a", "g", None, &[W]),
        node("b", "g", None, &[W]),
        node("d", "g", Some(OLD), &[]),
    ];
    let p = plan(&g, &nodes);
    assert_eq!(p.commands, vec![approve("a"), approve("b")]);
    assert_eq!(
        p.blocked,
        vec!["maxConcurrent 2 reached (updating: a, b)".to_owned()]
    );
    let nodes = [node("a", "g", None, &[A]), node("b", "g", None, &[W])];
    let p = plan(&g, &nodes);
    assert_eq!(p.commands, vec![approve("b")]);
    assert!(p.blocked.is_empty());
}

#[test]
fn every_slot_kind_counts() {
    let g = group("g", ApprovalMode::Automatic, Some(IntOrString::Int(4)));
    let nodes = [
        node("a", "g", None, &[A]),
        node("b", "g", None, &[DA]),
        node("c", "g", Some(OLD), &[DRAINING]),
        node("d", "g", Some(OLD), &[DRAINED]),
        node("e", "g", Some(OLD), &[DRAINED_USER]),
        node("f", "g", None, &[W]),
    ];
    let p = plan(&g, &nodes);
    assert!(p.commands.is_empty(), "{:?}", p.commands);
    assert_eq!(
        p.blocked,
        vec!["maxConcurrent 4 reached (updating: a, b, c, d)".to_owned()]
    );
}

#[test]
fn nothing_moves_while_a_node_is_not_ready() {
    let g = group("g", ApprovalMode::Automatic, Some(IntOrString::Int(5)));
    let mut sick = node("w-2", "g", Some(OLD), &[]);
    sick.ready = false;
    let nodes = [
        node("w-1", "g", None, &[W]),
        sick,
        node("w-3", "g", Some(OLD), &[A, DR]),
        node("w-4", "g", Some(DESIRED), &[A]),
    ];
    let p = plan(&g, &nodes);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::Finish {
            node: "w-4".into(),
            uncordon: false
        }]
    );
    assert_eq!(p.blocked, vec!["node w-2 is not Ready".to_owned()]);
}

#[test]
fn automatic_drains_then_approves_the_disruption() {
    let g = group("g", ApprovalMode::Automatic, None);
    let p = plan(&g, &[node("a", "g", None, &[A, DR])]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::StartDrain { node: "a".into() }]
    );
    let p = plan(&g, &[node("a", "g", None, &[A, DR, DRAINING])]);
    assert!(p.commands.is_empty());
    let mut drained = node("a", "g", None, &[A, DR, DRAINED]);
    drained.unschedulable = true;
    let p = plan(&g, &[drained]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::ApproveDisruption {
            node: "a".into(),
            cordon: false
        }]
    );
    let mut done = node("a", "g", Some(DESIRED), &[A, DA, DRAINED]);
    done.unschedulable = true;
    let p = plan(&g, &[done]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::Finish {
            node: "a".into(),
            uncordon: true
        }]
    );
}

#[test]
fn automatic_without_drain_cordons_while_approving() {
    let mut g = group("g", ApprovalMode::Automatic, None);
    if let Some(d) = g.spec.disruptions.as_mut() {
        d.automatic = Some(AutomaticDisruptions {
            drain_before_approval: Some(false),
            windows: None,
        });
    }
    let p = plan(&g, &[node("a", "g", None, &[A, DR])]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::ApproveDisruption {
            node: "a".into(),
            cordon: true
        }]
    );
    let mut cordoned = node("a", "g", None, &[A, DR]);
    cordoned.unschedulable = true;
    let p = plan(&g, &[cordoned]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::ApproveDisruption {
            node: "a".into(),
            cordon: false
        }]
    );
}

#[test]
fn single_master_is_not_drained() {
    let g = group("master", ApprovalMode::Automatic, None);
    let p = plan(&g, &[node("m-0", "master", None, &[A, DR])]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::ApproveDisruption {
            node: "m-0".into(),
            cordon: true
        }]
    );
}

#[test]
fn automatic_waits_for_its_window() {
    let mut g = group("g", ApprovalMode::Automatic, None);
    if let Some(d) = g.spec.disruptions.as_mut() {
        d.automatic = Some(AutomaticDisruptions {
            drain_before_approval: None,
            windows: Some(vec![DisruptionWindow {
                from: "01:00".into(),
                to: "02:00".into(),
                days: None,
            }]),
        });
    }
    let nodes = [node("a", "g", None, &[A, DR])];
    let snapshot = GroupSnapshot {
        group: &g,
        desired_checksum: DESIRED,
        nodes: nodes.iter().collect(),
    };
    let closed = plan_group_update(&snapshot, Timestamp::from_secs(0));
    assert!(closed.commands.is_empty());
    assert_eq!(
        closed.blocked,
        vec!["node a waits for a disruption window (disruptions.automatic.windows)".to_owned()]
    );
    let open = plan_group_update(&snapshot, Timestamp::from_secs(3600 + 60));
    assert_eq!(
        open.commands,
        vec![UpdateCommand::StartDrain { node: "a".into() }]
    );
}

#[test]
fn manual_never_approves_a_disruption() {
    let g = group("g", ApprovalMode::Manual, Some(IntOrString::Int(3)));
    let nodes = [
        node("a", "g", None, &[A, DR]),
        node("b", "g", None, &[A, DR, DRAINED_USER]),
        node("c", "g", None, &[W]),
    ];
    let p = plan(&g, &nodes);
    assert_eq!(p.commands, vec![approve("c")]);
    assert_eq!(p.blocked.len(), 2);
    assert!(p.blocked[0].contains("manual disruption approval"));
    // The operator approved and drained by hand: not uncordoned by us.
    let mut done = node("b", "g", Some(DESIRED), &[A, DA, DRAINED_USER]);
    done.unschedulable = true;
    let p = plan(&g, &[done]);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::Finish {
            node: "b".into(),
            uncordon: false
        }]
    );
}

#[test]
fn rolling_update_replaces_machines_inside_windows() {
    let mut g = group("g", ApprovalMode::RollingUpdate, None);
    let nodes = [node("a", "g", None, &[A, RU]), node("b", "g", None, &[W])];
    let p = plan(&g, &nodes);
    assert_eq!(
        p.commands,
        vec![UpdateCommand::ReplaceMachine { node: "a".into() }]
    );
    if let Some(d) = g.spec.disruptions.as_mut() {
        d.rolling_update = Some(RollingUpdateDisruptions {
            windows: Some(vec![DisruptionWindow {
                from: "10:00".into(),
                to: "11:00".into(),
                days: None,
            }]),
        });
    }
    let p = plan(&g, &nodes);
    assert!(p.commands.is_empty());
    assert!(p.blocked[0].contains("replacement window"));
}

#[test]
fn disruption_request_without_a_slot_is_approved_first() {
    let g = group("g", ApprovalMode::RollingUpdate, None);
    let p = plan(
        &g,
        &[node("a", "g", None, &[RU]), node("b", "g", None, &[RU])],
    );
    assert_eq!(p.commands, vec![approve("a")]);
}

#[test]
fn a_vanished_node_frees_its_slot() {
    let g = group("g", ApprovalMode::Automatic, None);
    let mut nodes = vec![
        node("a", "g", None, &[A, DR, DRAINING]),
        node("b", "g", None, &[W]),
    ];
    assert!(plan(&g, &nodes).commands.is_empty());
    nodes.remove(0);
    assert_eq!(plan(&g, &nodes).commands, vec![approve("b")]);
}

#[test]
fn finish_needs_the_desired_checksum_and_readiness() {
    let g = group("g", ApprovalMode::Automatic, None);
    let mut not_ready = node("a", "g", Some(DESIRED), &[A]);
    not_ready.ready = false;
    assert!(plan(&g, &[not_ready]).commands.is_empty());
    assert!(
        plan(&g, &[node("a", "g", Some(OLD), &[A])])
            .commands
            .is_empty()
    );
    // A person's drain marker alone is not ours to clean.
    assert!(
        plan(&g, &[node("a", "g", Some(DESIRED), &[DRAINED_USER])])
            .commands
            .is_empty()
    );
    let snapshot_nodes = [node("a", "g", Some(""), &[A])];
    let snapshot = GroupSnapshot {
        group: &g,
        desired_checksum: "",
        nodes: snapshot_nodes.iter().collect(),
    };
    assert!(
        plan_group_update(&snapshot, Timestamp::EPOCH)
            .commands
            .is_empty()
    );
}

#[test]
fn plan_updates_matches_nodes_by_group_label() {
    let groups = [
        group("g1", ApprovalMode::Automatic, None),
        group("g2", ApprovalMode::Automatic, None),
        group("unknown-checksum", ApprovalMode::Automatic, None),
    ];
    let checksums: BTreeMap<String, String> = [("g1", DESIRED), ("g2", DESIRED)]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    let nodes = [
        node("a", "g1", None, &[W]),
        node("b", "g1", None, &[W]),
        node("c", "g2", None, &[W]),
        node("d", "unknown-checksum", None, &[W]),
        node("e", "no-such-group", None, &[W]),
    ];
    let commands = plan_updates(&groups, &checksums, &nodes, Timestamp::EPOCH);
    assert_eq!(commands, vec![approve("a"), approve("c")]);
    let detailed = plan_updates_detailed(&groups, &checksums, &nodes, Timestamp::EPOCH);
    assert_eq!(detailed.len(), 2);
    assert_eq!(detailed[0].1.blocked.len(), 1);
}

#[test]
fn drains_are_created_for_start_drain_commands() {
    let mut g = group("g", ApprovalMode::Automatic, None);
    g.spec.node_drain_timeout_second = Some(60);
    let nodes = [node("a", "g", None, &[A, DR]), node("b", "g", None, &[])];
    let pods: Vec<Pod> = ["a", "a", "b"]
        .iter()
        .enumerate()
        .map(|(i, n)| Pod {
            namespace: "ns".into(),
            name: format!("p{i}"),
            node_name: Some((*n).into()),
            ..Pod::default()
        })
        .collect();
    let commands = plan_updates(
        std::slice::from_ref(&g),
        &BTreeMap::from([("g".to_owned(), DESIRED.to_owned())]),
        &nodes,
        Timestamp::EPOCH,
    );
    let drains = drains_for(&commands, &[g], &nodes, &pods, Timestamp::EPOCH);
    assert_eq!(drains.len(), 1);
    assert_eq!(drains[0].node(), "a");
    assert_eq!(drains[0].remaining().count(), 2);
    assert_eq!(
        drains[0].config().timeout,
        std::time::Duration::from_secs(60)
    );
}

#[test]
fn statuses_follow_the_metric() {
    let auto = group("g", ApprovalMode::Automatic, None);
    let manual = group("g", ApprovalMode::Manual, None);
    let s = |g: &NodeGroup, checksum: Option<&str>, marks: &[(&str, &str)]| {
        node_update_status(g, &node("n", "g", checksum, marks), DESIRED)
    };
    use NodeUpdateStatus as S;
    assert_eq!(s(&auto, None, &[W]), S::WaitingForApproval);
    assert_eq!(s(&auto, None, &[A]), S::Approved);
    assert_eq!(s(&auto, None, &[A, DR, DRAINING]), S::DrainingForDisruption);
    assert_eq!(s(&auto, Some(OLD), &[DRAINING]), S::Draining);
    assert_eq!(s(&auto, None, &[A, DR, DRAINED]), S::Drained);
    assert_eq!(s(&auto, None, &[A, DR]), S::WaitingForDisruptionApproval);
    assert_eq!(
        s(&manual, None, &[A, DR]),
        S::WaitingForManualDisruptionApproval
    );
    assert_eq!(s(&auto, None, &[A, DA]), S::DisruptionApproved);
    assert_eq!(s(&auto, Some(OLD), &[]), S::ToBeUpdated);
    assert_eq!(s(&auto, None, &[]), S::ToBeUpdated);
    assert_eq!(s(&auto, Some(DESIRED), &[]), S::UpToDate);
    assert_eq!(
        node_update_status(&auto, &node("n", "g", Some(DESIRED), &[]), ""),
        S::UpdateFailedNoConfigChecksum
    );
    assert_eq!(S::ALL.len(), 11);
    assert_eq!(
        S::DrainingForDisruption.to_string(),
        "DrainingForDisruption"
    );
}

#[test]
fn commands_display_for_people() {
    assert_eq!(approve("a").to_string(), "approve update of node a");
    assert_eq!(
        UpdateCommand::ApproveDisruption {
            node: "a".into(),
            cordon: true
        }
        .to_string(),
        "approve disruption of node a (cordon first)"
    );
    assert_eq!(
        UpdateCommand::Finish {
            node: "a".into(),
            uncordon: true
        }
        .to_string(),
        "finish update of node a and uncordon it"
    );
    assert_eq!(
        UpdateCommand::ReplaceMachine { node: "x".into() }.node(),
        "x"
    );
}

// ---- property tests: a small world of one group, an executor, agents and an operator ----

/// The executor: applies `command` to the node annotations the way the contract says.
fn apply(nodes: &mut Vec<Node>, command: &UpdateCommand, replacements: &mut usize) {
    let Some(i) = nodes.iter().position(|n| n.name == command.node()) else {
        return;
    };
    let n = &mut nodes[i];
    let a = &mut n.annotations;
    match command {
        UpdateCommand::Approve { .. } => {
            a.insert(keys::ANNOTATION_APPROVED.into(), String::new());
            a.remove(keys::ANNOTATION_WAITING_FOR_APPROVAL);
        }
        UpdateCommand::StartDrain { .. } => {
            a.insert(keys::ANNOTATION_DRAINING.into(), "bashible".into());
        }
        UpdateCommand::ApproveDisruption { cordon, .. } => {
            a.insert(keys::ANNOTATION_DISRUPTION_APPROVED.into(), String::new());
            a.remove(keys::ANNOTATION_DISRUPTION_REQUIRED);
            if *cordon {
                a.insert(keys::ANNOTATION_DRAINED.into(), "bashible".into());
                n.unschedulable = true;
            }
        }
        UpdateCommand::ReplaceMachine { .. } => {
            let old = nodes.remove(i);
            *replacements += 1;
            let mut fresh = Node {
                name: format!("{}-r{replacements}", old.name),
                labels: old.labels,
                ready: true,
                ..Node::default()
            };
            fresh.annotations.insert(
                keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(),
                DESIRED.into(),
            );
            nodes.push(fresh);
        }
        UpdateCommand::Finish { uncordon, .. } => {
            for &key in FINISH_REMOVES {
                a.remove(key);
            }
            if *uncordon {
                n.unschedulable = false;
            }
        }
    }
}

/// The executor's drains finishing: `draining` becomes `drained`, the node cordoned.
fn finish_drain(n: &mut Node) {
    if let Some(source) = n.annotations.remove(keys::ANNOTATION_DRAINING) {
        n.annotations
            .insert(keys::ANNOTATION_DRAINED.into(), source);
        n.unschedulable = true;
    }
}

/// The cooperative node agent (bashible, docs/deckhouse.md §3.1), one step.
fn agent_step(n: &mut Node, needs_disruption: bool, rolling: bool) {
    let m = UpdateMarks::of(n);
    if n.checksum() == Some(DESIRED) {
        return;
    }
    let a = &mut n.annotations;
    if !m.approved {
        if !m.waiting {
            a.insert(keys::ANNOTATION_WAITING_FOR_APPROVAL.into(), String::new());
            a.remove(keys::ANNOTATION_CONFIGURATION_CHECKSUM);
        }
    } else if needs_disruption && !m.disruption_approved {
        if !m.wants_disruption() {
            let key = if rolling {
                keys::ANNOTATION_ROLLING_UPDATE
            } else {
                keys::ANNOTATION_DISRUPTION_REQUIRED
            };
            a.insert(key.into(), String::new());
        }
    } else {
        a.insert(
            keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(),
            DESIRED.into(),
        );
    }
}

/// An operator approving disruptions by hand (Manual mode).
fn operator_step(n: &mut Node) {
    if n.annotations
        .remove(keys::ANNOTATION_DISRUPTION_REQUIRED)
        .is_some()
    {
        n.annotations
            .insert(keys::ANNOTATION_DISRUPTION_APPROVED.into(), String::new());
    }
}

fn mode_strategy() -> impl Strategy<Value = ApprovalMode> {
    prop_oneof![
        Just(ApprovalMode::Automatic),
        Just(ApprovalMode::Manual),
        Just(ApprovalMode::RollingUpdate),
        Just(ApprovalMode::Unknown("Sometimes".into())),
    ]
}

fn max_concurrent_strategy() -> impl Strategy<Value = Option<IntOrString>> {
    prop_oneof![
        Just(None),
        (1i64..5).prop_map(|n| Some(IntOrString::Int(n))),
        (1u8..101).prop_map(|p| Some(IntOrString::String(format!("{p}%")))),
    ]
}

fn windows_strategy() -> impl Strategy<Value = Option<Vec<DisruptionWindow>>> {
    proptest::option::of(proptest::collection::vec(
        (0u16..24, 0u16..24).prop_map(|(f, t)| DisruptionWindow {
            from: format!("{f:02}:00"),
            to: format!("{t:02}:00"),
            days: None,
        }),
        0..2,
    ))
}

fn group_strategy() -> impl Strategy<Value = NodeGroup> {
    (
        mode_strategy(),
        max_concurrent_strategy(),
        proptest::option::of(any::<bool>()),
        windows_strategy(),
        windows_strategy(),
        proptest::option::of(prop_oneof![
            Just(NodeType::CloudEphemeral),
            Just(NodeType::Static),
        ]),
        proptest::option::of(0i64..10),
    )
        .prop_map(
            |(mode, mc, drain, auto_windows, rolling_windows, node_type, desired)| {
                let mut g = group("g", mode, mc);
                g.spec.node_type = node_type;
                g.status = desired.map(|d| NodeGroupStatus {
                    desired: Some(d),
                    ..NodeGroupStatus::default()
                });
                if let Some(d) = g.spec.disruptions.as_mut() {
                    d.automatic = Some(AutomaticDisruptions {
                        drain_before_approval: drain,
                        windows: auto_windows,
                    });
                    d.rolling_update = Some(RollingUpdateDisruptions {
                        windows: rolling_windows,
                    });
                }
                g
            },
        )
}

/// A node with random readiness, cordon, checksum and update annotations.
fn node_strategy() -> impl Strategy<Value = Node> {
    (
        (0u8..20).prop_map(|r| r != 0),
        any::<bool>(),
        0u8..3,
        proptest::collection::vec(0usize..9, 0..4),
    )
        .prop_map(|(ready, unschedulable, checksum, marks)| {
            let all = [W, A, DR, DA, RU, DRAINING, DRAINED, DRAINED_USER, W];
            let chosen: Vec<(&str, &str)> = marks.iter().map(|i| all[*i]).collect();
            let checksum = [None, Some(OLD), Some(DESIRED)][usize::from(checksum)];
            let mut n = node("", "g", checksum, &chosen);
            n.ready = ready;
            n.unschedulable = unschedulable;
            n
        })
}

fn named(nodes: Vec<Node>) -> Vec<Node> {
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, mut n)| {
            n.name = format!("n{i:02}");
            n
        })
        .collect()
}

/// Checks one plan against the invariants of the module docs.
fn check_plan(
    g: &NodeGroup,
    nodes: &[Node],
    p: &UpdatePlan,
    now: Timestamp,
) -> Result<(), TestCaseError> {
    let mode = g.spec.approval_mode();
    let limit = max_concurrent(g, nodes.len());
    let before = nodes.iter().filter(|n| occupies_slot(n)).count();
    let mut after_nodes = nodes.to_vec();
    let mut replacements = 0;
    for c in &p.commands {
        apply(&mut after_nodes, c, &mut replacements);
    }
    let newly = after_nodes
        .iter()
        .filter(|n| occupies_slot(n) && !nodes.iter().any(|o| o.name == n.name && occupies_slot(o)))
        .count();
    prop_assert!(
        newly <= limit.saturating_sub(before),
        "{newly} nodes entered slots with {before} of {limit} taken: {:?}",
        p.commands
    );
    let after = after_nodes.iter().filter(|n| occupies_slot(n)).count();
    if before <= limit {
        prop_assert!(
            after <= limit,
            "{after} nodes in slots, limit {limit}: {:?}",
            p.commands
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for c in &p.commands {
        prop_assert!(
            seen.insert(c.node().to_owned()),
            "two commands for one node: {:?}",
            p.commands
        );
    }
    if nodes.iter().any(|n| !n.ready) {
        prop_assert!(
            p.commands.iter().all(|c| !c.is_step()),
            "step while not Ready: {:?}",
            p.commands
        );
    }
    let desired = g.status.as_ref().and_then(|s| s.desired);
    let ready = i64::try_from(nodes.iter().filter(|n| n.ready).count()).unwrap_or(i64::MAX);
    if g.spec.node_type == Some(NodeType::CloudEphemeral) && desired.is_none_or(|d| d != ready) {
        prop_assert!(
            p.commands.iter().all(|c| !c.is_step()),
            "step while CloudEphemeral desired {desired:?} != ready {ready}: {:?}",
            p.commands
        );
    }
    let windows = |rolling: bool| {
        g.spec
            .disruptions
            .as_ref()
            .and_then(|d| {
                if rolling {
                    d.rolling_update.as_ref().and_then(|r| r.windows.clone())
                } else {
                    d.automatic.as_ref().and_then(|a| a.windows.clone())
                }
            })
            .unwrap_or_default()
    };
    for c in &p.commands {
        match c {
            UpdateCommand::StartDrain { .. } | UpdateCommand::ApproveDisruption { .. } => {
                prop_assert_eq!(&mode, &ApprovalMode::Automatic, "{}", c);
                prop_assert!(
                    window_open(&windows(false), now),
                    "{} outside the window",
                    c
                );
            }
            UpdateCommand::ReplaceMachine { .. } => {
                prop_assert_eq!(&mode, &ApprovalMode::RollingUpdate);
                prop_assert!(window_open(&windows(true), now), "{} outside the window", c);
            }
            UpdateCommand::Approve { node } => {
                let n = nodes.iter().find(|n| &n.name == node).unwrap();
                prop_assert!(!occupies_slot(n));
            }
            UpdateCommand::Finish { node, uncordon } => {
                let n = nodes.iter().find(|n| &n.name == node).unwrap();
                prop_assert!(n.ready && n.checksum() == Some(DESIRED));
                prop_assert_eq!(*uncordon, UpdateMarks::of(n).cordoned_by_us());
            }
        }
    }
    Ok(())
}

/// End to end on a virtual clock: an Automatic group of three nodes, one pod per node that a
/// PodDisruptionBudget never lets go. Each node is approved alone, drained (the drain times
/// out after 5 minutes and force-deletes the stubborn pod, which still counts as drained),
/// gets its disruption approved, reports the new checksum, and is finished and uncordoned.
#[test]
fn scenario_automatic_update_with_stubborn_pods() {
    use crate::drain::{DrainCommand, DrainOutcome, EvictionOutcome};
    use std::time::Duration;

    let g = group("g", ApprovalMode::Automatic, None);
    let mut nodes = named(vec![node("", "g", Some(OLD), &[]); 3]);
    let mut pods: Vec<Pod> = Vec::new();
    for n in &nodes {
        for (i, stubborn) in [false, false, true].into_iter().enumerate() {
            pods.push(Pod {
                namespace: "app".into(),
                name: format!("{}-{}{i}", n.name, if stubborn { "pdb" } else { "web" }),
                node_name: Some(n.name.clone()),
                ..Pod::default()
            });
        }
    }
    let mut now = Timestamp::from_secs(1_000_000);
    let mut drains: Vec<Drain> = Vec::new();
    let mut replacements = 0;
    let mut timed_out = Vec::new();
    let mut max_in_slots = 0;
    for _ in 0..500 {
        for n in nodes.iter_mut() {
            agent_step(n, true, false);
        }
        let commands = plan_updates(
            std::slice::from_ref(&g),
            &BTreeMap::from([("g".to_owned(), DESIRED.to_owned())]),
            &nodes,
            now,
        );
        drains.extend(drains_for(
            &commands,
            std::slice::from_ref(&g),
            &nodes,
            &pods,
            now,
        ));
        for c in &commands {
            apply(&mut nodes, c, &mut replacements);
        }
        max_in_slots = max_in_slots.max(nodes.iter().filter(|n| occupies_slot(n)).count());
        // The executor runs its drains to the next deadline.
        for d in drains.iter_mut() {
            while let Some(command) = d.poll_command(now) {
                match command {
                    DrainCommand::Cordon { node } => {
                        if let Some(n) = nodes.iter_mut().find(|n| n.name == node) {
                            n.unschedulable = true;
                        }
                    }
                    DrainCommand::Evict { pod } if pod.contains("-pdb") => {
                        d.handle_eviction(&pod, EvictionOutcome::Refused, now);
                    }
                    DrainCommand::Evict { pod } => {
                        d.handle_eviction(&pod, EvictionOutcome::Evicted, now);
                        d.handle_pod_deleted(&pod, now);
                    }
                    DrainCommand::ForceDelete { pod } => {
                        assert!(now >= d.started() + Duration::from_secs(300));
                        d.handle_pod_deleted(&pod, now);
                    }
                }
            }
        }
        drains.retain(|d| match d.outcome() {
            None => true,
            Some(outcome) => {
                if let DrainOutcome::TimedOut { force_deleted } = outcome {
                    timed_out.extend(force_deleted.iter().cloned());
                }
                let n = nodes.iter_mut().find(|n| n.name == d.node()).unwrap();
                finish_drain(n);
                false
            }
        });
        let done = nodes.iter().all(|n| {
            n.checksum() == Some(DESIRED) && !UpdateMarks::of(n).ours() && !n.unschedulable
        });
        if done {
            break;
        }
        now = drains
            .iter()
            .filter_map(Drain::next_deadline)
            .min()
            .unwrap_or(now + Duration::from_secs(5))
            .max(now + Duration::from_secs(1));
    }
    assert!(
        nodes
            .iter()
            .all(|n| n.checksum() == Some(DESIRED) && !n.unschedulable)
    );
    assert_eq!(max_in_slots, 1);
    assert_eq!(
        timed_out,
        vec!["app/n00-pdb2", "app/n01-pdb2", "app/n02-pdb2"]
    );
    // Three drains of 5 minutes each, one node at a time.
    let elapsed = now.saturating_since(Timestamp::from_secs(1_000_000));
    assert!(elapsed >= Duration::from_secs(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(1000), "{elapsed:?}");
}

proptest! {
    // Cheap cases (about 0.2 ms each); more of them reach the rarer disruption steps.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Random groups and node states, iterated for several rounds with random agents,
    /// drains, operators, readiness flips and vanishing nodes: every plan keeps the slot
    /// limit, the all-Ready gate, the approval mode and the windows.
    #[test]
    fn plans_keep_limits_gates_modes_and_windows(
        g in group_strategy(),
        nodes in proptest::collection::vec(node_strategy(), 1..10),
        rounds in proptest::collection::vec(
            (0u32..(7 * 24 * 60), proptest::collection::vec(0u8..24, 10)),
            1..12,
        ),
    ) {
        let mut nodes = named(nodes);
        let mut replacements = 0;
        let mut minute = 0;
        let rolling = g.spec.approval_mode() == ApprovalMode::RollingUpdate;
        for (step, events) in rounds {
            minute += step;
            let now = Timestamp::from_secs(i64::from(minute) * 60);
            let refs: Vec<&Node> = nodes.iter().collect();
            let p = plan_group_update(
                &GroupSnapshot { group: &g, desired_checksum: DESIRED, nodes: refs },
                now,
            );
            check_plan(&g, &nodes, &p, now)?;
            for c in &p.commands {
                apply(&mut nodes, c, &mut replacements);
            }
            // The world moves: each node gets one random event.
            let mut vanish = None;
            for (i, n) in nodes.iter_mut().enumerate() {
                match events.get(i).copied().unwrap_or(23) {
                    0 => n.ready = !n.ready,
                    1 => vanish = Some(i),
                    2 | 3 => operator_step(n),
                    4..=7 => finish_drain(n),
                    8..=13 => agent_step(n, true, rolling),
                    14..=17 => agent_step(n, false, rolling),
                    _ => n.ready = true,
                }
            }
            if let Some(i) = vanish {
                nodes.remove(i);
            }
            if nodes.is_empty() {
                break;
            }
        }
    }

    /// Liveness: with every node Ready, no windows, a cooperative agent, an executor that
    /// finishes drains within the round and (Manual) an operator who approves, all `N`
    /// nodes run the desired checksum with clean annotations within
    /// `4 × ceil(N / maxConcurrent)` rounds.
    #[test]
    fn liveness_all_nodes_converge(
        mode in prop_oneof![
            Just(ApprovalMode::Automatic),
            Just(ApprovalMode::Manual),
            Just(ApprovalMode::RollingUpdate),
        ],
        mc in max_concurrent_strategy(),
        drain in proptest::option::of(any::<bool>()),
        disruptive in proptest::collection::vec(any::<bool>(), 1..16),
    ) {
        let mut g = group("g", mode.clone(), mc);
        if let Some(d) = g.spec.disruptions.as_mut() {
            d.automatic = Some(AutomaticDisruptions { drain_before_approval: drain, windows: None });
        }
        let n_nodes = disruptive.len();
        let mut nodes = named(vec![node("", "g", Some(OLD), &[]); n_nodes]);
        let needs: BTreeMap<String, bool> = nodes
            .iter()
            .zip(&disruptive)
            .map(|(n, d)| (n.name.clone(), *d))
            .collect();
        let limit = max_concurrent(&g, n_nodes);
        let bound = 4 * n_nodes.div_ceil(limit);
        let rolling = mode == ApprovalMode::RollingUpdate;
        let mut replacements = 0;
        let converged = |nodes: &[Node]| {
            nodes.iter().all(|n| n.checksum() == Some(DESIRED) && !UpdateMarks::of(n).ours() && !n.unschedulable)
        };
        let mut rounds = 0;
        while !converged(&nodes) {
            rounds += 1;
            prop_assert!(rounds <= bound, "not converged after {bound} rounds: {nodes:?}");
            for n in nodes.iter_mut() {
                let d = needs.get(&n.name).copied().unwrap_or(false);
                agent_step(n, d, rolling);
            }
            let refs: Vec<&Node> = nodes.iter().collect();
            let p = plan_group_update(
                &GroupSnapshot { group: &g, desired_checksum: DESIRED, nodes: refs },
                Timestamp::EPOCH,
            );
            check_plan(&g, &nodes, &p, Timestamp::EPOCH)?;
            for c in &p.commands {
                apply(&mut nodes, c, &mut replacements);
            }
            for n in nodes.iter_mut() {
                finish_drain(n);
                if mode == ApprovalMode::Manual {
                    operator_step(n);
                }
            }
        }
        prop_assert_eq!(nodes.len(), n_nodes);
    }
}

/// The planner as it walked the phases one after the other (before it read the group in one
/// pass, `plan_group_members`): the plain path the one-pass plan is compared with.
fn phased_plan(
    group: &NodeGroup,
    desired: &str,
    nodes: &[(&Node, UpdateMarks)],
    now: Timestamp,
) -> UpdatePlan {
    use crate::disruption::{Action, DisruptionSnapshot, METHODS, Stage, UpdateView, plan_stage};
    use std::collections::BTreeSet;
    let limit = max_concurrent(group, nodes.len());
    let mut occupied = nodes.iter().filter(|(_, m)| m.occupies_slot()).count();
    let not_ready: Vec<&str> = nodes
        .iter()
        .filter(|(n, _)| !n.ready)
        .map(|(n, _)| n.name.as_str())
        .collect();
    let mut plan = UpdatePlan::default();
    for (node, marks) in nodes {
        if node.ready && marks.ours() && !desired.is_empty() && node.checksum() == Some(desired) {
            plan.commands.push(UpdateCommand::Finish {
                node: node.name.clone(),
                uncordon: marks.cordoned_by_us(),
            });
        }
    }
    let finishing: BTreeSet<&str> = plan.commands.iter().map(UpdateCommand::node).collect();
    let candidates: Vec<&(&Node, UpdateMarks)> = nodes
        .iter()
        .filter(|(n, m)| {
            m.wants_disruption()
                && !m.disruption_approved
                && m.draining.is_none()
                && !finishing.contains(n.name.as_str())
        })
        .collect();
    let waiting: Vec<&(&Node, UpdateMarks)> = nodes
        .iter()
        .filter(|(n, m)| {
            m.waiting
                && !m.occupies_slot()
                && !m.wants_disruption()
                && !finishing.contains(n.name.as_str())
        })
        .collect();
    if candidates.is_empty() && waiting.is_empty() {
        return plan;
    }
    if !not_ready.is_empty() {
        for name in not_ready {
            plan.blocked.push(format!("node {name} is not Ready"));
        }
        return plan;
    }
    if let Some(reason) = super::planner::scaling_gate(group, nodes.len()) {
        plan.blocked.push(reason);
        return plan;
    }
    let mut full = false;
    let mut approved_now: Vec<&str> = Vec::new();
    let asking: Vec<(&Node, UpdateMarks)> = candidates
        .iter()
        .filter(|(_, m)| m.occupies_slot())
        .map(|c| **c)
        .collect();
    if !asking.is_empty() {
        let snapshot = DisruptionSnapshot {
            now,
            scaling: None,
            update: Some(UpdateView {
                group,
                group_size: nodes.len(),
                asking: &asking,
            }),
        };
        let planned = plan_stage(&METHODS, Stage::Update, &snapshot, &BTreeSet::new());
        plan.blocked.extend(planned.blocked);
        for p in planned.disruptions {
            if let Action::Update(command) = p.disruption.action {
                plan.commands.push(command);
            }
        }
    }
    for (node, _) in candidates.iter().filter(|(_, m)| !m.occupies_slot()) {
        if occupied < limit {
            occupied += 1;
            approved_now.push(&node.name);
            plan.commands.push(UpdateCommand::Approve {
                node: node.name.clone(),
            });
        } else {
            full = true;
        }
    }
    for (node, _) in &waiting {
        if occupied < limit {
            occupied += 1;
            approved_now.push(&node.name);
            plan.commands.push(UpdateCommand::Approve {
                node: node.name.clone(),
            });
        } else {
            full = true;
        }
    }
    if full {
        let mut updating: Vec<&str> = nodes
            .iter()
            .filter(|(_, m)| m.occupies_slot())
            .map(|(n, _)| n.name.as_str())
            .chain(approved_now)
            .collect();
        updating.sort_unstable();
        plan.blocked.push(format!(
            "maxConcurrent {limit} reached (updating: {})",
            updating.join(", ")
        ));
    }
    plan
}

/// A member carrying its checksum's hash, as the update executor's view keeps it.
#[derive(Clone, Copy)]
struct Hashed<'a>(&'a Node, UpdateMarks, Option<u64>);

impl<'a> PlanMember<'a> for Hashed<'a> {
    fn name(self) -> &'a str {
        &self.0.name
    }

    fn ready(self) -> bool {
        self.0.ready
    }

    fn checksum(self) -> Option<&'a str> {
        self.0.checksum()
    }

    fn marks(self) -> UpdateMarks {
        self.1
    }

    fn may_run(self, desired_hash: u64) -> bool {
        self.2 == Some(desired_hash)
    }

    fn whole_node(self) -> Option<&'a Node> {
        Some(self.0)
    }

    fn disruption_view(self) -> Node {
        self.0.clone()
    }
}

/// The phases' plan for `nodes` (with their marks) and what the view keeps of them, in order.
fn phased_plan_and_facts(
    group: &NodeGroup,
    nodes: &[Node],
    now: Timestamp,
) -> (UpdatePlan, Vec<crate::executor::node_table::NodeFacts>) {
    let marked: Vec<(&Node, UpdateMarks)> = nodes.iter().map(|n| (n, UpdateMarks::of(n))).collect();
    (
        phased_plan(group, DESIRED, &marked, now),
        facts_in_order(nodes),
    )
}

/// What the update executor's view keeps of each of `nodes`, at their positions in the list.
fn facts_in_order(nodes: &[Node]) -> Vec<crate::executor::node_table::NodeFacts> {
    nodes
        .iter()
        .zip(0u64..)
        .map(|(n, pos)| crate::executor::node_table::NodeFacts::of(n, pos))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The one-pass planner gives the plan the phases walked one after the other give, on
    /// random groups (modes, limits, windows, CloudEphemeral counts) and random nodes (some
    /// not Ready, some finishing, asking, waiting or holding slots; names possibly listed
    /// twice, in name order or not).
    #[test]
    fn a_plan_in_one_pass_is_the_phased_plan(
        g in group_strategy(),
        nodes in proptest::collection::vec((node_strategy(), 0u8..12), 0..14),
        sorted in any::<bool>(),
        minute in 0u32..(7 * 24 * 60),
    ) {
        let mut nodes: Vec<Node> = nodes
            .into_iter()
            .map(|(mut n, name)| {
                n.name = format!("n{name:02}");
                n
            })
            .collect();
        if sorted {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let marked: Vec<(&Node, UpdateMarks)> =
            nodes.iter().map(|n| (n, UpdateMarks::of(n))).collect();
        let now = Timestamp::from_secs(i64::from(minute) * 60);
        let phased = phased_plan(&g, DESIRED, &marked, now);
        let one_pass =
            super::planner::plan_group_members(&g, DESIRED, marked.iter().copied(), false, now);
        prop_assert_eq!(&one_pass.commands, &phased.commands);
        prop_assert_eq!(&one_pass.blocked, &phased.blocked);
        // Names listed once: the executor's shortcuts (no check against finishing names; the
        // checksum's lookup skipped for nodes whose checksum hashes otherwise).
        let mut seen = std::collections::BTreeSet::new();
        if marked.iter().all(|(n, _)| seen.insert(n.name.as_str())) {
            let unique =
                super::planner::plan_group_members(&g, DESIRED, marked.iter().copied(), true, now);
            prop_assert_eq!(&unique.commands, &phased.commands);
            prop_assert_eq!(&unique.blocked, &phased.blocked);
            let hashed = marked
                .iter()
                .map(|(n, m)| Hashed(n, *m, n.checksum().map(checksum_hash)));
            let hashed = super::planner::plan_group_members(&g, DESIRED, hashed, true, now);
            prop_assert_eq!(&hashed.commands, &phased.commands);
            prop_assert_eq!(&hashed.blocked, &phased.blocked);
        }
    }

    /// The planner reading what the update executor's view keeps of each node (its facts:
    /// name, readiness, checksum, marks, `unschedulable`; not the node) gives the plan the
    /// phases give from the nodes, on random groups and random nodes (names listed once, in
    /// name order, as the view hands them out).
    #[test]
    fn a_plan_from_the_views_facts_is_the_phased_plan(
        g in group_strategy(),
        nodes in proptest::collection::vec(node_strategy(), 0..10),
        minute in 0u32..(7 * 24 * 60),
    ) {
        let now = Timestamp::from_secs(i64::from(minute) * 60);
        let (phased, facts) = phased_plan_and_facts(&g, &named(nodes), now);
        let from_facts = super::planner::plan_group_members(&g, DESIRED, facts.iter(), true, now);
        prop_assert_eq!(&from_facts.commands, &phased.commands);
        prop_assert_eq!(&from_facts.blocked, &phased.blocked);
    }

    /// The planner walking only the members that are not [`Resting::Inert`] and counting the
    /// inert ones (as the update executor's view hands them out) gives the plan the phases
    /// give from every node, on random groups and random nodes (names listed once, in name
    /// order; about a quarter inert).
    #[test]
    fn a_plan_without_the_inert_members_is_the_plan_of_all(
        g in group_strategy(),
        nodes in proptest::collection::vec(node_strategy(), 0..12),
        minute in 0u32..(7 * 24 * 60),
    ) {
        let now = Timestamp::from_secs(i64::from(minute) * 60);
        let (phased, facts) = phased_plan_and_facts(&g, &named(nodes), now);
        let inert = facts.iter().filter(|f| f.resting == Resting::Inert).count();
        let active = facts.iter().filter(|f| f.resting != Resting::Inert);
        let plan =
            super::planner::plan_group_members_with_inert(&g, DESIRED, active, inert, true, now);
        prop_assert_eq!(&plan.commands, &phased.commands);
        prop_assert_eq!(&plan.blocked, &phased.blocked);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The marks read by a walk over a node's annotations (the walk from the first for a few
    /// annotations, the search for the prefix for many) are the marks looked up one by one,
    /// on random annotations among the marks, keys sorting around them (`u`, `update`,
    /// `update.node.deckhouse.io.example/…`, the bare prefix) and others, up to 24 of them.
    #[test]
    fn marks_read_by_a_walk_are_the_marks_looked_up(
        picked in proptest::collection::vec((0usize..40, 0u8..3), 0..24),
    ) {
        let mut pool: Vec<String> = [
            keys::ANNOTATION_WAITING_FOR_APPROVAL,
            keys::ANNOTATION_APPROVED,
            keys::ANNOTATION_DISRUPTION_REQUIRED,
            keys::ANNOTATION_DISRUPTION_APPROVED,
            keys::ANNOTATION_ROLLING_UPDATE,
            keys::ANNOTATION_DRAINING,
            keys::ANNOTATION_DRAINED,
            keys::UPDATE_ANNOTATION_PREFIX,
            "update.node.deckhouse.io/",
            "update.node.deckhouse.io/other",
            "update.node.deckhouse.io.example/approved",
            "update.node.deckhouse.iox/approved",
            "update.node.deckhouse.io-x/approved",
            "update.node.deckhouse.i",
            "update",
            "u",
            "ua/x",
            "uz/x",
            "t/x",
            "v/x",
            "",
            "~",
            "node.deckhouse.io/configuration-checksum",
            "node.deckhouse.io/group",
        ]
        .iter()
        .map(|k| (*k).to_owned())
        .collect();
        pool.extend((0..16).map(|i| format!("example.com/a{i:02}")));
        let mut n = Node::default();
        for (k, v) in picked {
            let value = ["", "bashible", "user"][usize::from(v)];
            if let Some(key) = pool.get(k) {
                n.annotations.insert(key.clone(), value.to_owned());
            }
        }
        let has = |k: &str| n.annotations.contains_key(k);
        let source = |k: &str| n.annotations.get(k).map(|v| DrainSource::parse(v));
        let looked_up = UpdateMarks {
            waiting: has(keys::ANNOTATION_WAITING_FOR_APPROVAL),
            approved: has(keys::ANNOTATION_APPROVED),
            disruption_required: has(keys::ANNOTATION_DISRUPTION_REQUIRED),
            disruption_approved: has(keys::ANNOTATION_DISRUPTION_APPROVED),
            rolling_update: has(keys::ANNOTATION_ROLLING_UPDATE),
            draining: source(keys::ANNOTATION_DRAINING),
            drained: source(keys::ANNOTATION_DRAINED),
        };
        prop_assert_eq!(UpdateMarks::of(&n), looked_up);
    }
}
