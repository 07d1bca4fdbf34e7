//! Which of a group's instances is cleaned up first when the group holds more than
//! `staticInstances.count` (the rule in the module docs, in one place).

use std::cmp::{Ordering, Reverse};

use super::View;
use crate::model::StaticInstancePhase;

/// How urgently an occupied instance should go: lower first.
fn class(view: &View<'_>) -> u8 {
    match view.phase {
        // A failed bootstrap holds a slot without serving.
        StaticInstancePhase::Error => 0,
        // A node that is gone or not Ready serves nobody.
        StaticInstancePhase::Running if view.node.is_none_or(|n| !n.ready) => 1,
        _ => 2,
    }
}

/// The occupied instances (indices into `views`) that may be cleaned up, most expendable
/// first: bootstrap errors, then Running instances whose Node is missing or not Ready, then
/// the newest Running ones (Node creation time descending, an unknown time counting as newest,
/// then name descending). Instances that are `Bootstrapping` or deleted are never chosen.
pub(super) fn cleanup_order(views: &[View<'_>], occupied: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = occupied
        .iter()
        .copied()
        .filter(|&i| {
            let v = &views[i];
            !v.deleted && v.phase != StaticInstancePhase::Bootstrapping
        })
        .collect();
    order.sort_by(|&a, &b| {
        let (va, vb) = (&views[a], &views[b]);
        class(va)
            .cmp(&class(vb))
            .then_with(|| {
                // Newest first: None (unknown) before any time, later times before earlier.
                let created = |v: &View<'_>| v.node.and_then(|n| n.created).map(Reverse);
                match (created(va), created(vb)) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => x.cmp(&y),
                }
            })
            .then_with(|| vb.name.cmp(va.name))
    });
    order
}
