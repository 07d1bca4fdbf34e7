//! The update-approval flow of a NodeGroup: which node may apply its new configuration, which is
//! drained, which gets its disruption approved or its machine replaced, and which is finished
//! and cleaned up (docs/deckhouse.md §3.2 and §9).
//!
//! [`plan_group_update`] takes a snapshot of one group (spec, desired configuration checksum and
//! the group's *existing* nodes with their annotations) and returns an [`UpdatePlan`]: commands
//! for the executor and human-readable reasons why nothing else moves. [`plan_updates`] does it
//! for every group. The node agent (bashible) drives the other half of the protocol through the
//! same annotations (docs/deckhouse.md §3.1): it sets `waiting-for-approval` when its checksum differs, waits
//! for `approved`, sets `disruption-required` (or `rolling-update`) at a disruptive step and waits
//! for `disruption-approved`, then reports the new checksum.
//!
//! # Phases of one plan
//! 1. **Finish**: a Ready node whose checksum equals the desired one (both non-empty) and that
//!    still carries update annotations ([`UpdateMarks::ours`]) is cleaned up ([`UpdateCommand::Finish`]); it is uncordoned
//!    only when nodemgr cordoned it (`draining`/`drained` = `bashible`).
//! 2. **Disruptions**: a node that asks for a disruption (`disruption-required` or
//!    `rolling-update`), is not being drained and holds a slot is offered to the disruption
//!    methods of [`crate::disruption::Stage::Update`] in [`crate::disruption::METHODS`] order,
//!    which proceed by `disruptions.approvalMode`: `Manual` waits for the operator; `Automatic`
//!    (inside `automatic.windows`) drains first when `drainBeforeApproval` (default) and then
//!    approves ([`crate::disruption::Drift`]); `RollingUpdate` (inside `rollingUpdate.windows`)
//!    replaces the machine ([`crate::disruption::RollingUpdate`]). A node asking for a
//!    disruption without holding a slot is first approved, which gives it one.
//! 3. **Approvals**: waiting nodes are approved, in name order, into the free slots.
//!
//! # Guarantees (stricter than Deckhouse, docs/deckhouse.md §3.2 and §11)
//! - A node *occupies a slot* while it has `approved`, `disruption-approved`, `draining` (any
//!   source) or `drained=bashible` ([`occupies_slot`]). Slots are counted over the snapshot's
//!   nodes only, so a node that disappears mid-update frees its slot.
//! - No step ([`UpdateCommand::Approve`], [`UpdateCommand::StartDrain`],
//!   [`UpdateCommand::ApproveDisruption`], [`UpdateCommand::ReplaceMachine`]) is planned while any
//!   node of the group is not Ready; Deckhouse approves not-Ready nodes, nodemgr does not.
//! - No step is planned for a CloudEphemeral group whose `status.desired` differs from its number
//!   of Ready nodes, or whose status carries no `desired` yet (Deckhouse's whole-group gate;
//!   nodemgr applies it to every step, Deckhouse to approvals).
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
//! operator who approves disruptions) and an executor that applies every command and finishes
//! each drain within the round, a round being *agent step, plan, apply*: a node holds its slot
//! for at most 4 rounds (approved in round r; the agent asks for a disruption and the node is
//! drained in r+1; its disruption is approved in r+2; the agent reports the checksum and the node
//! is finished in r+3; the slot is reused in r+4 — a non-disruptive update or a replaced machine
//! frees it after 2). Every node asks for approval in round 1 and slots are refilled in name
//! order, so `N` nodes with `c = max_concurrent` are all up to date and clean within
//! `4 × ceil(N / c)` rounds. The property `liveness_all_nodes_converge` checks this bound, and
//! it is tight (one disruptive node needs exactly 4).

mod command;
mod drains;
mod marks;
mod planner;
mod status;
#[cfg(test)]
mod tests;

pub use command::{FINISH_REMOVES, UpdateCommand, UpdatePlan};
pub use drains::{drains_for, drains_for_indexed};
pub use marks::{DrainSource, UpdateMarks, max_concurrent, occupies_slot};
pub use planner::{
    GroupSnapshot, plan_group_update, plan_group_update_marked, plan_group_update_sorted,
    plan_updates, plan_updates_detailed,
};
pub(crate) use planner::{PlanMember, Resting, checksum_hash, plan_group_members_with_inert};
pub use status::{NodeUpdateStatus, node_update_status};
