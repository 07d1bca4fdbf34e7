//! A node's update annotations read once ([`UpdateMarks`], [`DrainSource`]) and the group's
//! update slots: which nodes occupy one ([`occupies_slot`]) and how many there are
//! ([`max_concurrent`]).

use crate::model::{Node, NodeGroup, keys};

/// The source recorded in `draining`/`drained` (empty is read as `bashible`, docs/deckhouse.md §3).
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

    /// Whether the drain half of the update executor has anything to do with the node: it
    /// carries `draining` (a drain to run), or a person's `drained` (removed once the node is
    /// schedulable again, docs/deckhouse.md §3.3). A node nodemgr drained keeps its
    /// `drained=bashible` until the planner finishes its update; nothing is done to it there.
    pub fn drain_relevant(&self) -> bool {
        self.draining.is_some() || self.drained == Some(DrainSource::User)
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
    /// own `draining=user`/`drained=user`), which [`UpdateCommand::Finish`](super::UpdateCommand::Finish) cleans up.
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
/// unset or malformed (`validate` reports malformed values). The grammar and default are
/// [`crate::model::spec_facts::max_concurrent_limit`]'s.
pub fn max_concurrent(group: &NodeGroup, group_size: usize) -> usize {
    let value = group
        .spec
        .update
        .as_ref()
        .and_then(|u| u.max_concurrent.as_ref());
    crate::model::spec_facts::max_concurrent_limit(value, group_size)
}
