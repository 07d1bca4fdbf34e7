//! The update-approval flow of a NodeGroup: which node may apply its new configuration, which is
//! drained, which gets its disruption approved or its machine replaced, and which is finished
//! and cleaned up (seed 003 "updates", facts §3.2 and §9; issue 3 part 2).
//!
//! [`plan_group_update`] takes a snapshot of one group (spec, desired configuration checksum and
//! the group's *existing* nodes with their annotations) and returns an [`UpdatePlan`]: commands
//! for the executor and human-readable reasons why nothing else moves. [`plan_updates`] does it
//! for every group. The node agent (bashible) drives the other half of the protocol through the
//! same annotations (facts §3.1): it sets `waiting-for-approval` when its checksum differs, waits
//! for `approved`, sets `disruption-required` (or `rolling-update`) at a disruptive step and waits
//! for `disruption-approved`, then reports the new checksum.
//!
//! # Phases of one plan
//! 1. **Finish**: a Ready node whose checksum equals the desired one (both non-empty) and that
//!    still carries update annotations ([`UpdateMarks::ours`]) is cleaned up ([`UpdateCommand::Finish`]); it is uncordoned
//!    only when nodemgr cordoned it (`draining`/`drained` = `bashible`).
//! 2. **Disruptions**: a node that asks for a disruption (`disruption-required` or
//!    `rolling-update`), is not being drained and holds a slot proceeds by
//!    `disruptions.approvalMode`: `Manual` waits for the operator; `Automatic` (inside
//!    `automatic.windows`) drains first when `drainBeforeApproval` (default) and then approves;
//!    `RollingUpdate` (inside `rollingUpdate.windows`) replaces the machine. A node asking for a
//!    disruption without holding a slot is first approved, which gives it one.
//! 3. **Approvals**: waiting nodes are approved, in name order, into the free slots.
//!
//! # Guarantees (stricter than Deckhouse, facts §3.2 and §11)
//! - A node *occupies a slot* while it has `approved`, `disruption-approved`, `draining` (any
//!   source) or `drained=bashible` ([`occupies_slot`]). Slots are counted over the snapshot's
//!   nodes only, so a node that disappears mid-update frees its slot.
//! - No step ([`UpdateCommand::Approve`], [`UpdateCommand::StartDrain`],
//!   [`UpdateCommand::ApproveDisruption`], [`UpdateCommand::ReplaceMachine`]) is planned while any
//!   node of the group is not Ready; Deckhouse approves not-Ready nodes, nodemgr does not.
//! - A plan never makes more nodes occupy slots than [`max_concurrent`] allows, and disruption
//!   steps are inside that limit too (Deckhouse runs them uncapped). Slots freed by a
//!   [`UpdateCommand::Finish`] are reused by the next plan, not by the same one, so a partially
//!   applied plan cannot overshoot either.
//! - `Manual` never yields [`UpdateCommand::ApproveDisruption`]; an unknown approval mode is
//!   treated as `Manual`.
//! - Plans are deterministic (node-name order) and idempotent: a plan computed from the state a
//!   previous plan produced repeats no command whose effect is already visible, except
//!   [`UpdateCommand::ReplaceMachine`], which is repeated while the node still exists (deleting a
//!   machine twice is harmless).
//!
//! # Liveness
//! With every node Ready, no windows, no PDBs, a cooperative agent (and, in `Manual` mode, an
//! operator who approves disruptions) and an executor that applies every command (and finishes
//! each drain) within the round, a batch of up to `c = max_concurrent` nodes takes at most 4
//! rounds (approve; drain; approve disruption; finish — a non-disruptive update needs 2), so all
//! `N` nodes reach the desired checksum within `4 × ceil(N / c) + 1` rounds (the extra round is
//! the agent noticing the new checksum). The property test `liveness_all_nodes_converge` checks
//! this bound.

use std::collections::BTreeMap;
use std::fmt;

use crate::drain::{Drain, DrainConfig};
use crate::model::{ApprovalMode, Node, NodeGroup, Pod, Timestamp, keys};
use crate::window::window_open;

/// Everything the planner needs about one group.
#[derive(Debug, Clone)]
pub struct GroupSnapshot<'a> {
    /// The group (spec: `update.maxConcurrent`, `disruptions`).
    pub group: &'a NodeGroup,
    /// The configuration checksum the group's nodes should report; empty when unknown (then no
    /// node is finished).
    pub desired_checksum: &'a str,
    /// The group's existing nodes.
    pub nodes: Vec<&'a Node>,
}

/// A decision of the update planner, for the executor to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateCommand {
    /// Set `approved`, remove `waiting-for-approval`.
    Approve {
        /// The node.
        node: String,
    },
    /// Set `draining=bashible`; the executor runs a [`Drain`] and, when it ends (completed or
    /// timed out), sets `drained=bashible` and removes `draining`.
    StartDrain {
        /// The node.
        node: String,
    },
    /// Set `disruption-approved`, remove `disruption-required`. When `cordon` is true the
    /// executor cordons the node first and records that it did by setting `drained=bashible`
    /// (so that [`UpdateCommand::Finish`] uncordons it later).
    ApproveDisruption {
        /// The node.
        node: String,
        /// Cordon the node first (it is schedulable and was not drained).
        cordon: bool,
    },
    /// `RollingUpdate`: delete the node's machine so that a fresh one replaces it (the executor
    /// or cloud adapter decides how). Repeated by every plan while the node exists; idempotent.
    ReplaceMachine {
        /// The node.
        node: String,
    },
    /// The update is done: remove `approved`, `waiting-for-approval`, `disruption-required`,
    /// `disruption-approved`, `rolling-update`, `drained` and `draining`; uncordon when `uncordon`.
    Finish {
        /// The node.
        node: String,
        /// Uncordon: nodemgr cordoned the node (`drained`/`draining` = `bashible`).
        uncordon: bool,
    },
}

impl UpdateCommand {
    /// The node the command is about.
    pub fn node(&self) -> &str {
        match self {
            Self::Approve { node }
            | Self::StartDrain { node }
            | Self::ApproveDisruption { node, .. }
            | Self::ReplaceMachine { node }
            | Self::Finish { node, .. } => node,
        }
    }

    /// Whether the command moves a node forward (every command but [`UpdateCommand::Finish`]);
    /// such commands are never planned while a node of the group is not Ready.
    pub fn is_step(&self) -> bool {
        !matches!(self, Self::Finish { .. })
    }
}

impl fmt::Display for UpdateCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Approve { node } => write!(f, "approve update of node {node}"),
            Self::StartDrain { node } => write!(f, "drain node {node} before its disruption"),
            Self::ApproveDisruption { node, cordon } => {
                write!(f, "approve disruption of node {node}")?;
                if *cordon {
                    f.write_str(" (cordon first)")?;
                }
                Ok(())
            }
            Self::ReplaceMachine { node } => write!(f, "replace the machine of node {node}"),
            Self::Finish { node, uncordon } => {
                write!(f, "finish update of node {node}")?;
                if *uncordon {
                    f.write_str(" and uncordon it")?;
                }
                Ok(())
            }
        }
    }
}

/// The planner's answer for one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdatePlan {
    /// Commands, in the order to apply them (finishes, disruption steps, approvals).
    pub commands: Vec<UpdateCommand>,
    /// Why nodes that want to move do not, for people (`node w-2 is not Ready`).
    pub blocked: Vec<String>,
}

/// The source recorded in `draining`/`drained` (empty is read as `bashible`, facts §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainSource {
    /// nodemgr (Deckhouse: bashible) started the drain, and cordoned the node.
    Bashible,
    /// A person started the drain.
    User,
}

impl DrainSource {
    /// Reads an annotation value: `""` and `bashible` are [`DrainSource::Bashible`], anything
    /// else is a person's.
    pub fn parse(value: &str) -> Self {
        if value.is_empty() || value == keys::DRAIN_SOURCE_BASHIBLE {
            Self::Bashible
        } else {
            Self::User
        }
    }
}

/// The update annotations of a node, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateMarks {
    /// `waiting-for-approval`.
    pub waiting: bool,
    /// `approved`.
    pub approved: bool,
    /// `disruption-required`.
    pub disruption_required: bool,
    /// `disruption-approved`.
    pub disruption_approved: bool,
    /// `rolling-update`.
    pub rolling_update: bool,
    /// `draining` and its source.
    pub draining: Option<DrainSource>,
    /// `drained` and its source.
    pub drained: Option<DrainSource>,
}

impl UpdateMarks {
    /// Reads the marks of `node`.
    pub fn of(node: &Node) -> Self {
        let a = &node.annotations;
        Self {
            waiting: a.contains_key(keys::ANNOTATION_WAITING_FOR_APPROVAL),
            approved: a.contains_key(keys::ANNOTATION_APPROVED),
            disruption_required: a.contains_key(keys::ANNOTATION_DISRUPTION_REQUIRED),
            disruption_approved: a.contains_key(keys::ANNOTATION_DISRUPTION_APPROVED),
            rolling_update: a.contains_key(keys::ANNOTATION_ROLLING_UPDATE),
            draining: a
                .get(keys::ANNOTATION_DRAINING)
                .map(|v| DrainSource::parse(v)),
            drained: a
                .get(keys::ANNOTATION_DRAINED)
                .map(|v| DrainSource::parse(v)),
        }
    }

    /// Whether the node holds one of its group's update slots.
    pub fn occupies_slot(&self) -> bool {
        self.approved
            || self.disruption_approved
            || self.draining.is_some()
            || self.drained == Some(DrainSource::Bashible)
    }

    /// Whether the node asks for a disruption (`disruption-required` or `rolling-update`).
    pub fn wants_disruption(&self) -> bool {
        self.disruption_required || self.rolling_update
    }

    /// Whether nodemgr cordoned the node (its drain, or a cordoning disruption approval).
    pub fn cordoned_by_us(&self) -> bool {
        self.draining == Some(DrainSource::Bashible) || self.drained == Some(DrainSource::Bashible)
    }

    /// Whether the node carries update annotations of the update flow (anything but a person's
    /// own `draining=user`/`drained=user`), which [`UpdateCommand::Finish`] cleans up.
    pub fn ours(&self) -> bool {
        self.waiting
            || self.approved
            || self.disruption_required
            || self.disruption_approved
            || self.rolling_update
            || self.cordoned_by_us()
    }
}

/// Whether `node` occupies one of its group's update slots: it has `approved`,
/// `disruption-approved`, `draining` or `drained=bashible`.
pub fn occupies_slot(node: &Node) -> bool {
    UpdateMarks::of(node).occupies_slot()
}

/// How many nodes of `group` may update at once when it has `group_size` nodes:
/// `update.maxConcurrent` as an integer, or `floor(group_size × pct / 100)`, at least 1; 1 when
/// unset or malformed (`validate` reports malformed values).
pub fn max_concurrent(group: &NodeGroup, group_size: usize) -> usize {
    group
        .spec
        .update
        .as_ref()
        .and_then(|u| u.max_concurrent.as_ref())
        .and_then(|v| {
            v.resolve(u64::try_from(group_size).unwrap_or(u64::MAX))
                .ok()
        })
        .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX).max(1))
}

/// Whether a node whose disruption is approved in `Automatic` mode must be drained first.
/// Deckhouse skips the drain for the single node of group `master` (draining it would evict the
/// control plane's own workloads with nowhere to go).
fn needs_drain(group: &NodeGroup, group_size: usize) -> bool {
    group.spec.drain_before_approval() && !(group.name() == "master" && group_size <= 1)
}

/// Plans the next update steps of one group at `now` (see the module docs for the phases and
/// guarantees).
pub fn plan_group_update(snapshot: &GroupSnapshot<'_>, now: Timestamp) -> UpdatePlan {
    let group = snapshot.group;
    let desired = snapshot.desired_checksum;
    let mut nodes: Vec<(&Node, UpdateMarks)> = snapshot
        .nodes
        .iter()
        .map(|n| (*n, UpdateMarks::of(n)))
        .collect();
    nodes.sort_by(|a, b| a.0.name.cmp(&b.0.name));

    let limit = max_concurrent(group, nodes.len());
    let mut occupied = nodes.iter().filter(|(_, m)| m.occupies_slot()).count();
    let not_ready: Vec<&str> = nodes
        .iter()
        .filter(|(n, _)| !n.ready)
        .map(|(n, _)| n.name.as_str())
        .collect();
    let all_ready = not_ready.is_empty();
    let mut plan = UpdatePlan::default();

    // Phase 1: finish nodes that run the desired configuration.
    for (node, marks) in &nodes {
        if node.ready && !desired.is_empty() && node.checksum() == Some(desired) && marks.ours() {
            plan.commands.push(UpdateCommand::Finish {
                node: node.name.clone(),
                uncordon: marks.cordoned_by_us(),
            });
        }
    }
    let finishing = |name: &str, plan: &UpdatePlan| {
        plan.commands
            .iter()
            .any(|c| matches!(c, UpdateCommand::Finish { node, .. } if node == name))
    };

    // Who wants to move.
    let disruption_candidates: Vec<&(&Node, UpdateMarks)> = nodes
        .iter()
        .filter(|(n, m)| {
            m.wants_disruption()
                && !m.disruption_approved
                && m.draining.is_none()
                && !finishing(&n.name, &plan)
        })
        .collect();
    let waiting: Vec<&(&Node, UpdateMarks)> = nodes
        .iter()
        .filter(|(n, m)| {
            m.waiting && !m.occupies_slot() && !m.wants_disruption() && !finishing(&n.name, &plan)
        })
        .collect();
    if disruption_candidates.is_empty() && waiting.is_empty() {
        return plan;
    }
    if !all_ready {
        for name in not_ready {
            plan.blocked.push(format!("node {name} is not Ready"));
        }
        return plan;
    }

    // Phase 2: disruptions, first for nodes that already hold a slot.
    let mode = group.spec.approval_mode();
    let disruptions = group.spec.disruptions.as_ref();
    let automatic_windows = disruptions
        .and_then(|d| d.automatic.as_ref())
        .and_then(|a| a.windows.as_deref())
        .unwrap_or_default();
    let rolling_windows = disruptions
        .and_then(|d| d.rolling_update.as_ref())
        .and_then(|r| r.windows.as_deref())
        .unwrap_or_default();
    let mut full = false;
    for (node, marks) in disruption_candidates
        .iter()
        .filter(|(_, m)| m.occupies_slot())
    {
        let name = node.name.clone();
        match &mode {
            ApprovalMode::Automatic => {
                if !window_open(automatic_windows, now) {
                    plan.blocked.push(format!(
                        "node {name} waits for a disruption window (disruptions.automatic.windows)"
                    ));
                } else if needs_drain(group, nodes.len()) && marks.drained.is_none() {
                    plan.commands.push(UpdateCommand::StartDrain { node: name });
                } else {
                    let cordon = !node.unschedulable && marks.drained.is_none();
                    plan.commands
                        .push(UpdateCommand::ApproveDisruption { node: name, cordon });
                }
            }
            ApprovalMode::RollingUpdate => {
                if window_open(rolling_windows, now) {
                    plan.commands
                        .push(UpdateCommand::ReplaceMachine { node: name });
                } else {
                    plan.blocked.push(format!(
                        "node {name} waits for a replacement window (disruptions.rollingUpdate.windows)"
                    ));
                }
            }
            ApprovalMode::Manual | ApprovalMode::Unknown(_) => {
                plan.blocked.push(format!(
                    "node {name} waits for manual disruption approval (annotate it {})",
                    keys::ANNOTATION_DISRUPTION_APPROVED
                ));
            }
        }
    }
    // Nodes asking for a disruption without a slot get one first (phase 3 semantics).
    for (node, _) in disruption_candidates
        .iter()
        .filter(|(_, m)| !m.occupies_slot())
    {
        if occupied < limit {
            occupied += 1;
            plan.commands.push(UpdateCommand::Approve {
                node: node.name.clone(),
            });
        } else {
            full = true;
        }
    }

    // Phase 3: approvals into the free slots.
    for (node, _) in &waiting {
        if occupied < limit {
            occupied += 1;
            plan.commands.push(UpdateCommand::Approve {
                node: node.name.clone(),
            });
        } else {
            full = true;
        }
    }
    if full {
        let updating: Vec<&str> = nodes
            .iter()
            .filter(|(_, m)| m.occupies_slot())
            .map(|(n, _)| n.name.as_str())
            .collect();
        plan.blocked.push(format!(
            "maxConcurrent {limit} reached (updating: {})",
            updating.join(", ")
        ));
    }
    plan
}

/// Plans every group at once: nodes are matched to groups by their `node.deckhouse.io/group`
/// label; a group without an entry in `desired_checksums` is skipped (its checksum is not known
/// yet). Commands come group by group, in the order of `groups`.
pub fn plan_updates(
    groups: &[NodeGroup],
    desired_checksums: &BTreeMap<String, String>,
    nodes: &[Node],
    now: Timestamp,
) -> Vec<UpdateCommand> {
    plan_updates_detailed(groups, desired_checksums, nodes, now)
        .into_iter()
        .flat_map(|(_, plan)| plan.commands)
        .collect()
}

/// As [`plan_updates`], keeping each group's [`UpdatePlan`] (with its blocked reasons), in the
/// order of `groups`.
pub fn plan_updates_detailed(
    groups: &[NodeGroup],
    desired_checksums: &BTreeMap<String, String>,
    nodes: &[Node],
    now: Timestamp,
) -> Vec<(String, UpdatePlan)> {
    let mut by_group: BTreeMap<&str, Vec<&Node>> = BTreeMap::new();
    for node in nodes {
        if let Some(group) = node.group() {
            by_group.entry(group).or_default().push(node);
        }
    }
    groups
        .iter()
        .filter_map(|group| {
            let desired = desired_checksums.get(group.name())?;
            let snapshot = GroupSnapshot {
                group,
                desired_checksum: desired,
                nodes: by_group.remove(group.name()).unwrap_or_default(),
            };
            Some((group.name().to_owned(), plan_group_update(&snapshot, now)))
        })
        .collect()
}

/// Creates the [`Drain`]s for every [`UpdateCommand::StartDrain`] in `commands`, with each node's
/// group's [`DrainConfig`]; commands for nodes not in `nodes` are skipped.
pub fn drains_for(
    commands: &[UpdateCommand],
    groups: &[NodeGroup],
    nodes: &[Node],
    pods: &[Pod],
    now: Timestamp,
) -> Vec<Drain> {
    let draining: BTreeMap<&str, ()> = commands
        .iter()
        .filter(|c| matches!(c, UpdateCommand::StartDrain { .. }))
        .map(|c| (c.node(), ()))
        .collect();
    if draining.is_empty() {
        return Vec::new();
    }
    let mut pods_by_node: BTreeMap<&str, Vec<Pod>> = BTreeMap::new();
    for pod in pods {
        if let Some(node) = pod.node_name.as_deref()
            && draining.contains_key(node)
        {
            pods_by_node.entry(node).or_default().push(pod.clone());
        }
    }
    nodes
        .iter()
        .filter(|n| draining.contains_key(n.name.as_str()))
        .map(|node| {
            let config = node
                .group()
                .and_then(|g| groups.iter().find(|ng| ng.name() == g))
                .map(DrainConfig::for_group)
                .unwrap_or_default();
            let node_pods = pods_by_node.remove(node.name.as_str()).unwrap_or_default();
            Drain::new(node, &node_pods, config, now)
        })
        .collect()
}

/// Where a node is in its update, as Deckhouse's `node_group_node_status` metric reports it
/// (facts §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeUpdateStatus {
    /// Waits for `approved`.
    WaitingForApproval,
    /// Approved, applying a non-disruptive update.
    Approved,
    /// Approved, asks for a disruption and is being drained for it.
    DrainingForDisruption,
    /// Being drained (for another reason).
    Draining,
    /// Drained.
    Drained,
    /// Approved, asks for a disruption that nodemgr will approve (`Automatic`, `RollingUpdate`).
    WaitingForDisruptionApproval,
    /// Approved, asks for a disruption an operator must approve (`Manual`).
    WaitingForManualDisruptionApproval,
    /// The disruption is approved; the agent applies the update.
    DisruptionApproved,
    /// Runs an older configuration and has not asked for approval yet.
    ToBeUpdated,
    /// Runs the desired configuration.
    UpToDate,
    /// The desired checksum is unknown.
    UpdateFailedNoConfigChecksum,
}

impl NodeUpdateStatus {
    /// Every status, in the order of the metric's label values.
    pub const ALL: [NodeUpdateStatus; 11] = [
        Self::WaitingForApproval,
        Self::Approved,
        Self::DrainingForDisruption,
        Self::Draining,
        Self::Drained,
        Self::WaitingForDisruptionApproval,
        Self::WaitingForManualDisruptionApproval,
        Self::DisruptionApproved,
        Self::ToBeUpdated,
        Self::UpToDate,
        Self::UpdateFailedNoConfigChecksum,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitingForApproval => "WaitingForApproval",
            Self::Approved => "Approved",
            Self::DrainingForDisruption => "DrainingForDisruption",
            Self::Draining => "Draining",
            Self::Drained => "Drained",
            Self::WaitingForDisruptionApproval => "WaitingForDisruptionApproval",
            Self::WaitingForManualDisruptionApproval => "WaitingForManualDisruptionApproval",
            Self::DisruptionApproved => "DisruptionApproved",
            Self::ToBeUpdated => "ToBeUpdated",
            Self::UpToDate => "UpToDate",
            Self::UpdateFailedNoConfigChecksum => "UpdateFailedNoConfigChecksum",
        }
    }
}

impl fmt::Display for NodeUpdateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The update status of `node` in `group` (facts §9). Cases are evaluated in the metric's order
/// with one correction: the plain `Approved` case is checked after the more specific approved
/// cases (draining for a disruption, waiting for a disruption approval, disruption approved),
/// which it would otherwise hide; the checksum cases come last.
pub fn node_update_status(
    group: &NodeGroup,
    node: &Node,
    desired_checksum: &str,
) -> NodeUpdateStatus {
    let m = UpdateMarks::of(node);
    let manual = matches!(
        group.spec.approval_mode(),
        ApprovalMode::Manual | ApprovalMode::Unknown(_)
    );
    if m.waiting {
        NodeUpdateStatus::WaitingForApproval
    } else if m.approved && m.wants_disruption() && m.draining.is_some() {
        NodeUpdateStatus::DrainingForDisruption
    } else if m.draining.is_some() {
        NodeUpdateStatus::Draining
    } else if m.drained.is_some() {
        NodeUpdateStatus::Drained
    } else if m.approved && m.wants_disruption() && !m.disruption_approved {
        if manual {
            NodeUpdateStatus::WaitingForManualDisruptionApproval
        } else {
            NodeUpdateStatus::WaitingForDisruptionApproval
        }
    } else if m.approved && m.disruption_approved {
        NodeUpdateStatus::DisruptionApproved
    } else if m.approved {
        NodeUpdateStatus::Approved
    } else if desired_checksum.is_empty() {
        NodeUpdateStatus::UpdateFailedNoConfigChecksum
    } else if node.checksum() == Some(desired_checksum) {
        NodeUpdateStatus::UpToDate
    } else {
        NodeUpdateStatus::ToBeUpdated
    }
}
