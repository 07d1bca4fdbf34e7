//! Disruption methods: why a healthy node is taken away — its configuration drifted (a
//! disruptive update, [`drift`]), its group replaces machines for that ([`rolling_update`]), its
//! instance class changed ([`class_change`]), the chaos monkey chose it ([`chaos`]) — each one
//! strategy behind one small interface ([`DisruptionMethod`]), all of them in one ordered list
//! ([`METHODS`]) that the executors iterate, as Karpenter's disruption controller iterates its
//! methods (docs/executors.md §6).
//!
//! # The shape
//! - [`DisruptionReason`]: one variant per method. Everything that names, counts or reports a
//!   reason — the log text ([`fmt::Display`]), the Kubernetes Event
//!   (`executor::scaling`), the metric label (`nodemgr-k8s` `metrics`), the simulator's timeline
//!   kind (`nodemgr-sim` `scaling`) — matches it exhaustively, without a wildcard, so a new
//!   variant that one of them forgets does not compile.
//! - [`DisruptionMethod`]: `reason()`, `stage()` (where in which executor's step it runs) and
//!   `propose()`, a pure function of a [`DisruptionSnapshot`] returning the nodes it would
//!   disrupt now ([`Proposal`]). A method never reads a clock or the cluster; the executors fill
//!   the snapshot.
//! - [`METHODS`]: the ordered list. [`plan_stage`] asks the methods of one stage in list order;
//!   a node already claimed (by the executor, or by an earlier method) is not given to a later
//!   one ([`DisruptionPlan::superseded`]). The list is sorted by stage (a test checks it), so
//!   list order is precedence across stages too: the scaling executor runs its
//!   [`Stage::BeforeSizing`] methods before its [`Stage::AfterSizing`] ones and passes what the
//!   first claimed (leaving nodes) to the second.
//!
//! # The stages
//! | stage | executor | where in its step | methods |
//! |---|---|---|---|
//! | [`Stage::BeforeSizing`] | scaling | before bounds, so the victim's replacement is ordered in the same step | chaos |
//! | [`Stage::AfterSizing`] | scaling | after bounds, which ordered the new machines (new before old) | class change |
//! | [`Stage::Update`] | update | phase 2 of [`crate::update::plan_group_update`], for nodes holding a slot and asking for a disruption | rolling update, drift |
//!
//! Across the two executors precedence is the cluster's: a node the scaling executor removes
//! carries `draining`, which the update planner never approves a disruption for, and a node
//! being disrupted for an update is not Ready-and-whole for the chaos monkey.
//!
//! # Adding a reason (say, node expiry)
//! 1. A variant of [`DisruptionReason`] (and its place in [`DisruptionReason::ALL`] and
//!    [`DisruptionReason::index`]); the compiler then lists every place that reports reasons.
//! 2. One file in this directory with a unit struct implementing [`DisruptionMethod`].
//! 3. Its registration: one entry in [`METHODS`], at the position that gives it its precedence.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::model::{Node, NodeGroup, Timestamp};
use crate::scaling::{ChaosState, ClusterSnapshot, ScalingConfig};
use crate::update::{UpdateCommand, UpdateMarks};

pub mod chaos;
pub mod class_change;
pub mod drift;
pub mod rolling_update;

pub use chaos::Chaos;
pub use class_change::ClassChange;
pub use drift::Drift;
pub use rolling_update::RollingUpdate;

/// Why a healthy node is disrupted. Matched exhaustively wherever a reason is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DisruptionReason {
    /// The chaos monkey's victim (`chaos.mode: DrainAndDelete`, docs/deckhouse.md §7).
    Chaos,
    /// The node was made from an outdated instance class (docs/deckhouse.md §10).
    ClassChange,
    /// A disruptive update replaces the node's machine (`approvalMode: RollingUpdate`).
    RollingUpdate,
    /// A disruptive update is applied in place (`approvalMode: Automatic` or `Manual`): the
    /// node's configuration drifted from its group's.
    Drift,
}

impl DisruptionReason {
    /// Every reason, in [`DisruptionReason::index`] order.
    pub const ALL: [Self; 4] = [
        Self::Chaos,
        Self::ClassChange,
        Self::RollingUpdate,
        Self::Drift,
    ];

    /// The reason's position in [`DisruptionReason::ALL`].
    pub fn index(self) -> usize {
        match self {
            Self::Chaos => 0,
            Self::ClassChange => 1,
            Self::RollingUpdate => 2,
            Self::Drift => 3,
        }
    }
}

impl fmt::Display for DisruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Chaos => "chaos monkey victim",
            Self::ClassChange => "instance class changed: replaced",
            Self::RollingUpdate => "disruptive update: machine replaced (RollingUpdate)",
            Self::Drift => "disruptive update: configuration drifted",
        })
    }
}

/// Where a method runs: which executor, and where in its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// The scaling executor, before bounds.
    BeforeSizing,
    /// The scaling executor, after bounds.
    AfterSizing,
    /// The update planner, phase 2 (disruptions of nodes holding a slot).
    Update,
}

/// What the scaling executor knows at its stages.
#[derive(Debug, Clone, Copy)]
pub struct ScalingView<'a> {
    /// The scaling snapshot (earlier phases' removals leaving, their orders upcoming).
    pub cluster: &'a ClusterSnapshot<'a>,
    /// The scaling policies' tunables.
    pub config: &'a ScalingConfig,
    /// The chaos monkey's memory.
    pub chaos: &'a ChaosState,
    /// The chaos monkey's randomness.
    pub chaos_seed: u64,
}

/// What the update planner knows about one group at its disruption phase.
#[derive(Debug, Clone, Copy)]
pub struct UpdateView<'a> {
    /// The group.
    pub group: &'a NodeGroup,
    /// Its number of nodes.
    pub group_size: usize,
    /// Its nodes that hold a slot, ask for a disruption and are neither draining nor approved
    /// for it yet, in name order.
    pub asking: &'a [(&'a Node, UpdateMarks)],
}

/// The pure snapshot a method proposes from. Each executor fills the view it owns; a method
/// whose view is absent proposes nothing.
#[derive(Debug, Clone, Copy)]
pub struct DisruptionSnapshot<'a> {
    /// Now.
    pub now: Timestamp,
    /// The scaling executor's view.
    pub scaling: Option<ScalingView<'a>>,
    /// The update planner's view of one group.
    pub update: Option<UpdateView<'a>>,
}

/// How a disruption is carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Drain the node and delete its machine (the scaling executor's removal).
    Remove {
        /// The node's zone.
        zone: String,
    },
    /// An update step (the update executor applies it).
    Update(UpdateCommand),
}

/// One node a method would disrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disruption {
    /// The node.
    pub node: String,
    /// Its group.
    pub group: String,
    /// How.
    pub action: Action,
}

/// A method's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proposal {
    /// The nodes it would disrupt now.
    pub disruptions: Vec<Disruption>,
    /// Why nodes that want to move do not (the update planner's `blocked`).
    pub blocked: Vec<String>,
    /// Notes for people.
    pub notes: Vec<String>,
    /// The chaos monkey's memory for the next step (only [`Chaos`] sets it).
    pub chaos: Option<ChaosState>,
}

/// The removals among a scaling policy's commands, as disruptions (its orders are the sizing
/// phases' business). Shared by the methods that wrap a scaling policy ([`Chaos`],
/// [`ClassChange`]).
fn removals(commands: Vec<crate::scaling::ScalingCommand>) -> Vec<Disruption> {
    commands
        .into_iter()
        .filter_map(|command| match command {
            crate::scaling::ScalingCommand::RemoveNode {
                node, group, zone, ..
            } => Some(Disruption {
                node,
                group,
                action: Action::Remove { zone },
            }),
            crate::scaling::ScalingCommand::CreateNodes { .. } => None,
        })
        .collect()
}

/// A disruption a method won.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The winning method's reason.
    pub reason: DisruptionReason,
    /// What to do.
    pub disruption: Disruption,
}

/// A node a method proposed but did not get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    /// The node.
    pub node: String,
    /// The method that proposed it.
    pub reason: DisruptionReason,
    /// The earlier method that claimed it (`None`: it was claimed before the stage).
    pub by: Option<DisruptionReason>,
}

/// The methods' answers for one stage, resolved by list order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisruptionPlan {
    /// The disruptions to carry out, in list order (each method's own order within).
    pub disruptions: Vec<Planned>,
    /// Proposals that lost to an earlier claim.
    pub superseded: Vec<Superseded>,
    /// The methods' `blocked`, in list order.
    pub blocked: Vec<String>,
    /// The methods' notes, in list order.
    pub notes: Vec<String>,
    /// The chaos monkey's memory for the next step, when its method ran.
    pub chaos: Option<ChaosState>,
}

/// A disruption strategy: one reason, one stage, one pure proposal.
pub trait DisruptionMethod: Sync {
    /// The reason it disrupts for.
    fn reason(&self) -> DisruptionReason;
    /// Where it runs.
    fn stage(&self) -> Stage;
    /// The nodes it would disrupt given `snapshot` (pure; nothing when its view is absent).
    fn propose(&self, snapshot: &DisruptionSnapshot<'_>) -> Proposal;
}

/// Every disruption method, in precedence order: a node two methods pick goes to the earlier
/// one. Sorted by [`Stage`].
pub static METHODS: [&dyn DisruptionMethod; 4] = [&Chaos, &ClassChange, &RollingUpdate, &Drift];

/// Asks the methods of `stage` among `methods`, in order, and resolves their proposals: a node
/// in `claimed` (taken before the stage, e.g. already leaving) or proposed by an earlier
/// method goes to no later one.
pub fn plan_stage(
    methods: &[&dyn DisruptionMethod],
    stage: Stage,
    snapshot: &DisruptionSnapshot<'_>,
    claimed: &BTreeSet<String>,
) -> DisruptionPlan {
    let mut plan = DisruptionPlan::default();
    // The nodes taken by an earlier method are the ones planned so far: looked for among
    // them while they are few, by a map of them past that.
    let mut taken: Option<BTreeMap<String, DisruptionReason>> = None;
    for method in methods.iter().filter(|m| m.stage() == stage) {
        let reason = method.reason();
        let proposal = method.propose(snapshot);
        plan.blocked.extend(proposal.blocked);
        plan.notes.extend(proposal.notes);
        if proposal.chaos.is_some() {
            plan.chaos = proposal.chaos;
        }
        for disruption in proposal.disruptions {
            let by = if claimed.contains(&disruption.node) {
                Some(None)
            } else {
                taken_by(&plan.disruptions, taken.as_ref(), &disruption.node).map(Some)
            };
            if let Some(by) = by {
                plan.superseded.push(Superseded {
                    node: disruption.node,
                    reason,
                    by,
                });
                continue;
            }
            match &mut taken {
                Some(taken) => {
                    taken.insert(disruption.node.clone(), reason);
                }
                None if plan.disruptions.len() >= SCAN_TAKEN_AT_MOST => {
                    let mut map: BTreeMap<String, DisruptionReason> = plan
                        .disruptions
                        .iter()
                        .map(|p| (p.disruption.node.clone(), p.reason))
                        .collect();
                    map.insert(disruption.node.clone(), reason);
                    taken = Some(map);
                }
                None => {}
            }
            plan.disruptions.push(Planned { reason, disruption });
        }
    }
    plan
}

/// How many planned disruptions [`plan_stage`] looks through for a node before it keeps a map
/// of them.
const SCAN_TAKEN_AT_MOST: usize = 16;

/// The method that took `node` among the disruptions `planned` so far (`taken`: the same, as a
/// map by node, once there are many).
fn taken_by(
    planned: &[Planned],
    taken: Option<&BTreeMap<String, DisruptionReason>>,
    node: &str,
) -> Option<DisruptionReason> {
    match taken {
        Some(taken) => taken.get(node).copied(),
        None => planned
            .iter()
            .find(|p| p.disruption.node == node)
            .map(|p| p.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A method that proposes a fixed list of nodes.
    struct Picks {
        reason: DisruptionReason,
        stage: Stage,
        nodes: &'static [&'static str],
    }

    impl DisruptionMethod for Picks {
        fn reason(&self) -> DisruptionReason {
            self.reason
        }
        fn stage(&self) -> Stage {
            self.stage
        }
        fn propose(&self, _: &DisruptionSnapshot<'_>) -> Proposal {
            Proposal {
                disruptions: self
                    .nodes
                    .iter()
                    .map(|n| Disruption {
                        node: (*n).to_owned(),
                        group: "g".into(),
                        action: Action::Remove { zone: "a".into() },
                    })
                    .collect(),
                ..Proposal::default()
            }
        }
    }

    fn empty() -> DisruptionSnapshot<'static> {
        DisruptionSnapshot {
            now: Timestamp::EPOCH,
            scaling: None,
            update: None,
        }
    }

    fn winners(plan: &DisruptionPlan) -> Vec<(&str, DisruptionReason)> {
        plan.disruptions
            .iter()
            .map(|p| (p.disruption.node.as_str(), p.reason))
            .collect()
    }

    #[test]
    fn list_order_decides_who_gets_a_node_two_methods_pick() {
        let chaos = Picks {
            reason: DisruptionReason::Chaos,
            stage: Stage::AfterSizing,
            nodes: &["n1", "n2"],
        };
        let class = Picks {
            reason: DisruptionReason::ClassChange,
            stage: Stage::AfterSizing,
            nodes: &["n2", "n3"],
        };
        let plan = plan_stage(
            &[&chaos, &class],
            Stage::AfterSizing,
            &empty(),
            &BTreeSet::new(),
        );
        assert_eq!(
            winners(&plan),
            [
                ("n1", DisruptionReason::Chaos),
                ("n2", DisruptionReason::Chaos),
                ("n3", DisruptionReason::ClassChange)
            ]
        );
        assert_eq!(
            plan.superseded,
            [Superseded {
                node: "n2".into(),
                reason: DisruptionReason::ClassChange,
                by: Some(DisruptionReason::Chaos)
            }]
        );
        // The other order: the same node goes the other way.
        let plan = plan_stage(
            &[&class, &chaos],
            Stage::AfterSizing,
            &empty(),
            &BTreeSet::new(),
        );
        assert_eq!(
            winners(&plan),
            [
                ("n2", DisruptionReason::ClassChange),
                ("n3", DisruptionReason::ClassChange),
                ("n1", DisruptionReason::Chaos)
            ]
        );
        assert_eq!(plan.superseded[0].by, Some(DisruptionReason::ClassChange));
    }

    #[test]
    fn claimed_nodes_and_other_stages_are_left_alone() {
        let chaos = Picks {
            reason: DisruptionReason::Chaos,
            stage: Stage::BeforeSizing,
            nodes: &["n1", "n2"],
        };
        let class = Picks {
            reason: DisruptionReason::ClassChange,
            stage: Stage::AfterSizing,
            nodes: &["n2"],
        };
        let claimed: BTreeSet<String> = ["n1".to_owned()].into();
        let plan = plan_stage(&[&chaos, &class], Stage::BeforeSizing, &empty(), &claimed);
        assert_eq!(winners(&plan), [("n2", DisruptionReason::Chaos)]);
        assert_eq!(plan.superseded[0].by, None);
    }

    #[test]
    fn the_list_has_one_method_per_reason_sorted_by_stage() {
        for (i, reason) in DisruptionReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i, "{reason:?}");
            assert_eq!(
                METHODS.iter().filter(|m| m.reason() == *reason).count(),
                1,
                "{reason:?} needs exactly one method in METHODS"
            );
        }
        assert_eq!(METHODS.len(), DisruptionReason::ALL.len());
        assert!(
            METHODS.windows(2).all(|w| w[0].stage() <= w[1].stage()),
            "METHODS must be sorted by stage, so that list order is precedence"
        );
        // Precedence as documented: chaos over class change, rolling update over drift.
        let order: Vec<DisruptionReason> = METHODS.iter().map(|m| m.reason()).collect();
        assert_eq!(
            order,
            [
                DisruptionReason::Chaos,
                DisruptionReason::ClassChange,
                DisruptionReason::RollingUpdate,
                DisruptionReason::Drift
            ]
        );
    }

    /// A method that proposes nodes chosen by proptest.
    struct Chosen {
        reason: DisruptionReason,
        nodes: Vec<String>,
    }

    impl DisruptionMethod for Chosen {
        fn reason(&self) -> DisruptionReason {
            self.reason
        }
        fn stage(&self) -> Stage {
            Stage::Update
        }
        fn propose(&self, _: &DisruptionSnapshot<'_>) -> Proposal {
            Proposal {
                disruptions: self
                    .nodes
                    .iter()
                    .map(|n| Disruption {
                        node: n.clone(),
                        group: "g".into(),
                        action: Action::Remove { zone: "a".into() },
                    })
                    .collect(),
                ..Proposal::default()
            }
        }
    }

    /// Node `n{n}`'s name, as the properties below draw nodes.
    fn node_name(n: &u8) -> String {
        format!("n{n}")
    }

    /// The names of the drawn nodes.
    fn node_names(drawn: &BTreeSet<u8>) -> BTreeSet<String> {
        drawn.iter().map(node_name).collect()
    }

    /// One method per list of drawn nodes, each picking those nodes, with the reasons in
    /// [`DisruptionReason::ALL`]'s order (starting over when there are more methods).
    fn methods_picking(picks: &[Vec<u8>]) -> Vec<Chosen> {
        picks
            .iter()
            .enumerate()
            .map(|(i, nodes)| Chosen {
                reason: DisruptionReason::ALL[i % DisruptionReason::ALL.len()],
                nodes: nodes.iter().map(node_name).collect(),
            })
            .collect()
    }

    proptest::proptest! {
        /// Whatever the methods pick, each node is disrupted at most once, by the first method
        /// in list order that picked it, unless it was claimed before; every proposal is either
        /// planned or superseded.
        #[test]
        fn each_node_goes_to_the_first_method_that_picks_it(
            picks in proptest::collection::vec(
                proptest::collection::vec(0..6_u8, 0..5), 1..5),
            claimed in proptest::collection::btree_set(0..6_u8, 0..3),
        ) {
            let methods = methods_picking(&picks);
            let list: Vec<&dyn DisruptionMethod> =
                methods.iter().map(|m| m as &dyn DisruptionMethod).collect();
            let claimed = node_names(&claimed);
            let plan = plan_stage(&list, Stage::Update, &empty(), &claimed);
            let mut seen = BTreeSet::new();
            for p in &plan.disruptions {
                proptest::prop_assert!(seen.insert(p.disruption.node.clone()), "{} twice", p.disruption.node);
                proptest::prop_assert!(!claimed.contains(&p.disruption.node));
                let first = methods
                    .iter()
                    .find(|m| m.nodes.contains(&p.disruption.node))
                    .map(|m| m.reason);
                proptest::prop_assert_eq!(first, Some(p.reason));
            }
            let proposed: usize = methods.iter().map(|m| m.nodes.len()).sum();
            proptest::prop_assert_eq!(plan.disruptions.len() + plan.superseded.len(), proposed);
            for node in methods.iter().flat_map(|m| &m.nodes) {
                proptest::prop_assert!(claimed.contains(node) || seen.contains(node));
            }
        }
    }

    /// [`plan_stage`] with a map of the nodes taken from the first one on.
    fn plan_stage_by_map(
        methods: &[&dyn DisruptionMethod],
        stage: Stage,
        snapshot: &DisruptionSnapshot<'_>,
        claimed: &BTreeSet<String>,
    ) -> DisruptionPlan {
        let mut plan = DisruptionPlan::default();
        let mut taken: BTreeMap<String, DisruptionReason> = BTreeMap::new();
        for method in methods.iter().filter(|m| m.stage() == stage) {
            let reason = method.reason();
            let proposal = method.propose(snapshot);
            plan.blocked.extend(proposal.blocked);
            plan.notes.extend(proposal.notes);
            if proposal.chaos.is_some() {
                plan.chaos = proposal.chaos;
            }
            for disruption in proposal.disruptions {
                let by = if claimed.contains(&disruption.node) {
                    Some(None)
                } else {
                    taken.get(&disruption.node).map(|by| Some(*by))
                };
                if let Some(by) = by {
                    plan.superseded.push(Superseded {
                        node: disruption.node,
                        reason,
                        by,
                    });
                    continue;
                }
                taken.insert(disruption.node.clone(), reason);
                plan.disruptions.push(Planned { reason, disruption });
            }
        }
        plan
    }

    proptest::proptest! {
        /// The nodes taken looked for among the planned ones (a map of them once there are
        /// many) resolve the proposals as a map of them from the first one on does: the same
        /// plan, superseded proposals and their winners included.
        #[test]
        fn taken_nodes_looked_for_resolve_as_a_map_of_them(
            picks in proptest::collection::vec(
                proptest::collection::vec(0..48_u8, 0..30), 1..5),
            claimed in proptest::collection::btree_set(0..48_u8, 0..6),
        ) {
            let methods = methods_picking(&picks);
            let list: Vec<&dyn DisruptionMethod> =
                methods.iter().map(|m| m as &dyn DisruptionMethod).collect();
            let claimed = node_names(&claimed);
            proptest::prop_assert_eq!(
                plan_stage(&list, Stage::Update, &empty(), &claimed),
                plan_stage_by_map(&list, Stage::Update, &empty(), &claimed)
            );
        }
    }

    #[test]
    fn methods_without_their_view_propose_nothing() {
        for method in METHODS {
            assert_eq!(method.propose(&empty()), Proposal::default());
        }
    }
}
