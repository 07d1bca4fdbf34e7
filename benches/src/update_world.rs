//! A synthetic cluster for the `update_planning` benchmark: node groups with mixed approval
//! modes and `maxConcurrent`, nodes in every phase of an update (up to date, waiting, approved,
//! asking for a disruption, draining, drained, done and waiting to be finished), one not-Ready
//! node in every fifth group, and pods spread over the nodes (a tenth owned by DaemonSets).

use std::collections::BTreeMap;

use nodemgr_core::model::{
    ApprovalMode, AutomaticDisruptions, Disruptions, IntOrString, Node, NodeGroup, ObjectMeta,
    Owner, Pod, PodPhase, Update, keys,
};

/// A tiny seeded xorshift64* generator (no `rand` dependency).
#[derive(Debug, Clone)]
pub struct UpdateRng(u64);

impl UpdateRng {
    /// A generator from `seed` (zero is replaced by a fixed non-zero seed).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Everything `plan_updates` and `drains_for` take.
#[derive(Debug, Clone)]
pub struct UpdateWorld {
    /// The node groups.
    pub groups: Vec<NodeGroup>,
    /// Desired configuration checksum per group.
    pub desired: BTreeMap<String, String>,
    /// The nodes, labelled with their group.
    pub nodes: Vec<Node>,
    /// The pods, bound to nodes.
    pub pods: Vec<Pod>,
}

/// Builds a world of `groups` groups, `nodes` nodes spread evenly over them and `pods` pods
/// spread evenly over the nodes, from `seed`.
pub fn update_world(groups: usize, nodes: usize, pods: usize, seed: u64) -> UpdateWorld {
    let mut rng = UpdateRng::new(seed);
    let groups_vec: Vec<NodeGroup> = (0..groups)
        .map(|i| {
            let mut g = NodeGroup {
                metadata: ObjectMeta {
                    name: Some(format!("group-{i:03}")),
                    ..ObjectMeta::default()
                },
                ..NodeGroup::default()
            };
            let mode = match i % 4 {
                0 | 1 => ApprovalMode::Automatic,
                2 => ApprovalMode::Manual,
                _ => ApprovalMode::RollingUpdate,
            };
            g.spec.disruptions = Some(Disruptions {
                approval_mode: Some(mode),
                automatic: Some(AutomaticDisruptions {
                    drain_before_approval: Some(i % 8 != 1),
                    windows: None,
                }),
                rolling_update: None,
            });
            g.spec.update = Some(Update {
                max_concurrent: Some(match i % 3 {
                    0 => IntOrString::Int(1),
                    1 => IntOrString::Int(3),
                    _ => IntOrString::String("20%".into()),
                }),
            });
            g
        })
        .collect();
    let desired = groups_vec
        .iter()
        .map(|g| (g.name().to_owned(), format!("sum-{}-new", g.name())))
        .collect();
    let nodes_vec: Vec<Node> = (0..nodes)
        .map(|i| {
            let group_index = i % groups.max(1);
            let group = groups_vec[group_index].name().to_owned();
            // Every fifth group has one node that is not Ready (its first), blocking its steps.
            let mut n = Node {
                name: format!("node-{i:05}"),
                ready: !(group_index % 5 == 4 && i < groups.max(1)),
                ..Node::default()
            };
            n.labels
                .insert(keys::LABEL_NODE_GROUP.into(), group.clone());
            let a = &mut n.annotations;
            let mut set = |k: &str, v: &str| {
                a.insert(k.to_owned(), v.to_owned());
            };
            match rng.below(12) {
                0..=3 => set(
                    keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                    &format!("sum-{group}-new"),
                ),
                4 | 5 => set(keys::ANNOTATION_WAITING_FOR_APPROVAL, ""),
                6 => set(keys::ANNOTATION_APPROVED, ""),
                7 => {
                    set(keys::ANNOTATION_APPROVED, "");
                    set(keys::ANNOTATION_DISRUPTION_REQUIRED, "");
                }
                8 => {
                    set(keys::ANNOTATION_APPROVED, "");
                    set(keys::ANNOTATION_DISRUPTION_REQUIRED, "");
                    set(keys::ANNOTATION_DRAINING, "bashible");
                }
                9 => {
                    set(keys::ANNOTATION_APPROVED, "");
                    set(keys::ANNOTATION_DISRUPTION_REQUIRED, "");
                    set(keys::ANNOTATION_DRAINED, "bashible");
                    n.unschedulable = true;
                }
                10 => {
                    set(keys::ANNOTATION_APPROVED, "");
                    set(
                        keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                        &format!("sum-{group}-new"),
                    );
                }
                _ => {
                    set(keys::ANNOTATION_APPROVED, "");
                    set(keys::ANNOTATION_DISRUPTION_APPROVED, "");
                    set(keys::ANNOTATION_DRAINED, "bashible");
                    set(
                        keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                        &format!("sum-{group}-new"),
                    );
                    n.unschedulable = true;
                }
            }
            n
        })
        .collect();
    let pods_vec = (0..pods)
        .map(|i| {
            let node = &nodes_vec[i % nodes.max(1)];
            let owner = match rng.below(10) {
                0 => "DaemonSet",
                1 => "StatefulSet",
                _ => "ReplicaSet",
            };
            Pod {
                namespace: format!("ns-{}", i % 50),
                name: format!("pod-{i:06}"),
                uid: format!("uid-{i}"),
                node_name: Some(node.name.clone()),
                owner: Some(Owner {
                    kind: owner.into(),
                    name: format!("owner-{}", i % 1000),
                }),
                phase: PodPhase::Running,
                ..Pod::default()
            }
        })
        .collect();
    UpdateWorld {
        groups: groups_vec,
        desired,
        nodes: nodes_vec,
        pods: pods_vec,
    }
}
