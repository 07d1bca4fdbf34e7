//! The agents' wake-ups ([`Agenda`]): `(when, node)` entries, each once, in order, answering
//! as the ordered set it replaced. A wake-up is queued at the current time plus the agents'
//! reaction time, so it usually goes after every one queued: it is appended without a search
//! of a tree, and the ones due leave from the front.

use std::collections::VecDeque;

use nodemgr_core::model::Timestamp;

use super::NodeId;

/// Agent wake-ups `(when, node)`, each once, in order (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Agenda {
    /// Strictly ascending.
    entries: VecDeque<(Timestamp, NodeId)>,
}

impl Agenda {
    /// No wake-ups.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `entry` unless it is queued already; whether it was new.
    pub fn insert(&mut self, entry: (Timestamp, NodeId)) -> bool {
        if self.entries.back().is_some_and(|last| *last >= entry) {
            match self.entries.binary_search(&entry) {
                Ok(_) => return false,
                Err(at) => self.entries.insert(at, entry),
            }
        } else {
            self.entries.push_back(entry);
        }
        true
    }

    /// The earliest wake-up.
    pub fn first(&self) -> Option<&(Timestamp, NodeId)> {
        self.entries.front()
    }

    /// How many wake-ups are queued.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The wake-ups, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &(Timestamp, NodeId)> {
        self.entries.iter()
    }

    /// Takes out the wake-ups before `bound`, in order.
    pub fn take_before(&mut self, bound: Timestamp) -> Vec<(Timestamp, NodeId)> {
        let due = self.entries.partition_point(|(t, _)| *t < bound);
        self.entries.drain(..due).collect()
    }

    /// Keeps only the wake-ups `keep` says to.
    pub fn retain(&mut self, keep: impl FnMut(&(Timestamp, NodeId)) -> bool) {
        self.entries.retain(keep);
    }
}

#[cfg(test)]
mod tests {
    //! The agenda against the ordered set it replaced.

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Wake-ups queued mostly after the last one (as the world queues them), sometimes
        /// before it or again, taken out up to a bound and dropped by node: the agenda holds
        /// and hands out what a `BTreeSet` of the same entries does.
        #[test]
        fn the_agenda_is_an_ordered_set(
            ops in prop::collection::vec((0u8..8, 0i64..12, 0u32..5), 0..200),
        ) {
            let mut agenda = Agenda::new();
            let mut set: BTreeSet<(Timestamp, NodeId)> = BTreeSet::new();
            let mut now = 0i64;
            for (op, dt, node) in ops {
                let id = NodeId::for_tests(node);
                match op {
                    // At the current time plus a reaction (or earlier / the same again).
                    0..=3 => {
                        let entry = (Timestamp::from_secs(now + dt), id);
                        prop_assert_eq!(agenda.insert(entry), set.insert(entry));
                    }
                    4 => {
                        let entry = (Timestamp::from_secs(now + dt / 4), id);
                        prop_assert_eq!(agenda.insert(entry), set.insert(entry));
                    }
                    5 => {
                        now += dt;
                        let bound = Timestamp::from_secs(now);
                        let later = set.split_off(&(bound, NodeId::MIN));
                        let due: Vec<_> = std::mem::replace(&mut set, later).into_iter().collect();
                        prop_assert_eq!(agenda.take_before(bound), due);
                    }
                    6 => {
                        agenda.retain(|(_, n)| *n != id);
                        set.retain(|(_, n)| *n != id);
                    }
                    _ => prop_assert_eq!(agenda.first(), set.first()),
                }
                prop_assert_eq!(agenda.len(), set.len());
                prop_assert_eq!(agenda.is_empty(), set.is_empty());
                let listed: Vec<_> = agenda.iter().copied().collect();
                let expected: Vec<_> = set.iter().copied().collect();
                prop_assert_eq!(listed, expected);
            }
        }
    }
}
