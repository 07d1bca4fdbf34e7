//! A node's update annotations read once ([`UpdateMarks`], [`DrainSource`]) and the group's
//! update slots: which nodes occupy one ([`occupies_slot`]) and how many there are
//! ([`max_concurrent`]).

use std::ops::Bound;

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

/// How many annotations a node may have for [`UpdateMarks::of`] to walk them from the first.
const SCAN_AT_MOST: usize = 16;

/// The first byte of every update annotation's key.
const PREFIX_FIRST: u8 = b'u';
const _: () = assert!(matches!(
    keys::UPDATE_ANNOTATION_PREFIX.as_bytes().first(),
    Some(&PREFIX_FIRST)
));

/// The first byte of the configuration checksum's key, which sorts before every update
/// annotation's.
const CHECKSUM_FIRST: u8 = b'n';
const _: () = assert!(matches!(
    keys::ANNOTATION_CONFIGURATION_CHECKSUM.as_bytes().first(),
    Some(&CHECKSUM_FIRST)
));
const _: () = assert!(CHECKSUM_FIRST < PREFIX_FIRST);

/// A node's update marks with the two annotations read beside them ([`UpdateMarks::read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeMarks<'a> {
    /// Its update marks ([`UpdateMarks::of`]).
    pub(crate) marks: UpdateMarks,
    /// Its configuration checksum ([`Node::checksum`]).
    pub(crate) checksum: Option<&'a str>,
    /// The value of its `draining` annotation.
    pub(crate) draining: Option<&'a str>,
}

/// The update annotations of a node, read once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    /// Reads the marks of `node`: one ordered walk over its `update.node.deckhouse.io/…`
    /// annotations (they sort together), not a lookup per mark.
    ///
    /// A node with few annotations (at most 16, as most have) has them walked
    /// from the first, each told by its first byte from the marks (`u`) until they begin,
    /// instead of a search for where they begin that compares whole keys: the same marks (the
    /// property `marks_read_by_a_walk_are_the_marks_looked_up` compares both ways with a
    /// lookup of each mark).
    pub fn of(node: &Node) -> Self {
        Self::read(node).marks
    }

    /// [`UpdateMarks::of`] `node` with its configuration checksum ([`Node::checksum`]) and
    /// its `draining` annotation's value, read in the same walk over its annotations (the
    /// checksum's key sorts before the marks) instead of a search of each (the property
    /// `marks_read_with_the_checksum_are_the_ones_looked_up` compares both ways).
    pub(crate) fn read(node: &Node) -> NodeMarks<'_> {
        if node.annotations.len() <= SCAN_AT_MOST {
            let mut checksum = None;
            let mut entries = node.annotations.iter();
            let mut first_mark = None;
            for (key, value) in entries.by_ref() {
                // Before the marks: a first byte below `u`, or `u…` sorting before them.
                let before = match key.as_bytes().first() {
                    Some(&b) if b == PREFIX_FIRST => key.as_str() < keys::UPDATE_ANNOTATION_PREFIX,
                    Some(&b) => {
                        if b == CHECKSUM_FIRST && key == keys::ANNOTATION_CONFIGURATION_CHECKSUM {
                            checksum = Some(value.as_str());
                        }
                        b < PREFIX_FIRST
                    }
                    None => true,
                };
                if !before {
                    first_mark = Some((key, value));
                    break;
                }
            }
            let (marks, draining) = Self::of_entries(first_mark.into_iter().chain(entries));
            NodeMarks {
                marks,
                checksum,
                draining,
            }
        } else {
            let from = (
                Bound::Included(keys::UPDATE_ANNOTATION_PREFIX),
                Bound::Unbounded,
            );
            let (marks, draining) = Self::of_entries(node.annotations.range::<str, _>(from));
            NodeMarks {
                marks,
                checksum: node.checksum(),
                draining,
            }
        }
    }

    /// The marks among `entries`, annotations in key order from the first that does not sort
    /// before the update annotations' prefix, and the value of `draining` among them.
    fn of_entries<'a>(
        entries: impl Iterator<Item = (&'a String, &'a String)>,
    ) -> (Self, Option<&'a str>) {
        let mut marks = Self::default();
        let mut draining = None;
        for (key, value) in entries {
            let Some(mark) = key
                .strip_prefix(keys::UPDATE_ANNOTATION_PREFIX)
                .and_then(|rest| rest.strip_prefix('/'))
            else {
                if key.starts_with(keys::UPDATE_ANNOTATION_PREFIX) {
                    // `update.node.deckhouse.io.example/…` and the like sort among the marks.
                    continue;
                }
                break;
            };
            match mark {
                "waiting-for-approval" => marks.waiting = true,
                "approved" => marks.approved = true,
                "disruption-required" => marks.disruption_required = true,
                "disruption-approved" => marks.disruption_approved = true,
                "rolling-update" => marks.rolling_update = true,
                "draining" => {
                    marks.draining = Some(DrainSource::parse(value));
                    draining = Some(value.as_str());
                }
                "drained" => marks.drained = Some(DrainSource::parse(value)),
                _ => {}
            }
        }
        (marks, draining)
    }

    /// `UpdateMarks::of(node).drain_relevant()`, by the two lookups it needs instead of the
    /// walk over every update annotation (the drain half asks it of every node a step
    /// patched).
    pub(crate) fn drain_relevant_in(node: &Node) -> bool {
        node.annotations.contains_key(keys::ANNOTATION_DRAINING)
            || node
                .annotations
                .get(keys::ANNOTATION_DRAINED)
                .is_some_and(|v| DrainSource::parse(v) == DrainSource::User)
    }

    /// Whether `UpdateMarks::of(node)` has `draining` or `drained` (any source), by two
    /// lookups.
    pub(crate) fn drain_marked_in(node: &Node) -> bool {
        node.annotations.contains_key(keys::ANNOTATION_DRAINING)
            || node.annotations.contains_key(keys::ANNOTATION_DRAINED)
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::StringMap;

    /// The marks as one lookup per annotation reads them (what `of` did before its walk).
    fn looked_up(node: &Node) -> UpdateMarks {
        let a = &node.annotations;
        UpdateMarks {
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

    /// Annotation keys around the update marks: the marks, keys that sort among them but are
    /// not marks (another separator, a longer name, a longer domain) and unrelated ones.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(keys::ANNOTATION_WAITING_FOR_APPROVAL.to_owned()),
            Just(keys::ANNOTATION_APPROVED.to_owned()),
            Just(keys::ANNOTATION_DISRUPTION_REQUIRED.to_owned()),
            Just(keys::ANNOTATION_DISRUPTION_APPROVED.to_owned()),
            Just(keys::ANNOTATION_ROLLING_UPDATE.to_owned()),
            Just(keys::ANNOTATION_DRAINING.to_owned()),
            Just(keys::ANNOTATION_DRAINED.to_owned()),
            Just(keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned()),
            Just("update.node.deckhouse.io/approvedx".to_owned()),
            Just("update.node.deckhouse.io/drained-x".to_owned()),
            Just("update.node.deckhouse.io/drainf".to_owned()),
            Just("update.node.deckhouse.io/draininga".to_owned()),
            Just("update.node.deckhouse.io.example/approved".to_owned()),
            Just("update.node.deckhouse.io-other/draining".to_owned()),
            Just("update.node.deckhouse.io".to_owned()),
            Just("update.node.deckhouse.i/approved".to_owned()),
            Just("zzz/approved".to_owned()),
            "[a-z./-]{0,30}",
        ]
    }

    /// A Node with up to 11 annotations drawn from [`key`], valued as a controller or the
    /// agent would write them.
    fn marked_node() -> impl Strategy<Value = Node> {
        proptest::collection::btree_map(
            key(),
            prop_oneof![
                Just(String::new()),
                Just("bashible".to_owned()),
                Just("user".to_owned())
            ],
            0..12,
        )
        .prop_map(|annotations| Node {
            annotations: StringMap::from(annotations),
            ..Node::default()
        })
    }

    proptest! {
        #[test]
        fn one_walk_reads_the_marks_one_lookup_per_key_reads(
            node in marked_node()
        ) {
            prop_assert_eq!(UpdateMarks::of(&node), looked_up(&node));
        }

        /// The marks, checksum and `draining` value read in one walk are the ones looked up
        /// key by key.
        #[test]
        fn marks_read_with_the_checksum_are_the_ones_looked_up(
            node in marked_node(),
            checksum in proptest::option::of("[a-z0-9]{0,8}"),
            more in proptest::collection::btree_map("[a-z./-]{1,30}", Just(String::new()), 0..10),
        ) {
            let mut node = node;
            if let Some(checksum) = checksum {
                node.annotations
                    .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned(), checksum);
            }
            // Now and then past the annotations walked from the first.
            if more.len() % 2 == 0 {
                node.annotations.extend(more);
            }
            let read = UpdateMarks::read(&node);
            prop_assert_eq!(read.marks, looked_up(&node));
            prop_assert_eq!(read.checksum, node.checksum());
            prop_assert_eq!(
                read.draining,
                node.annotations.get(keys::ANNOTATION_DRAINING).map(String::as_str)
            );
        }

        /// The drain half's two-lookup questions answer as the marks read by the walk do.
        #[test]
        fn drain_questions_by_lookup_answer_as_the_marks(
            node in marked_node()
        ) {
            let marks = UpdateMarks::of(&node);
            prop_assert_eq!(UpdateMarks::drain_relevant_in(&node), marks.drain_relevant());
            prop_assert_eq!(
                UpdateMarks::drain_marked_in(&node),
                marks.draining.is_some() || marks.drained.is_some()
            );
        }
    }
}
