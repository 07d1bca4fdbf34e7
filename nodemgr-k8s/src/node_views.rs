//! The core views of the Nodes the port lists, kept between listings: a Node whose
//! `resourceVersion` did not change since the previous listing is not converted again, and its
//! new view shares the label, annotation and allocatable maps of the previous one
//! (`docs/scale.md` §2).
//!
//! Every update pass, status count and template pass lists every Node. Converting a Node copies
//! its labels and annotations into new maps; at 5,000 nodes that is tens of MiB allocated per
//! listing, held while the pass runs and retained by the allocator afterwards, and several
//! passes run at once. A view reused from the previous listing costs its few strings and one
//! reference count per map.
//!
//! A view is reused only when the Node carries the same uid and the same non-empty
//! `resourceVersion` as when it was converted: the API server gives every change of a Node a
//! new `resourceVersion`, so the same one means the same content. A listing forgets the views
//! of the Nodes it did not deliver, so deleted Nodes are not kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use nodemgr_core::model as core;

use crate::convert::node_to_core;

/// Views by node name, each with the listing that last delivered its Node.
#[derive(Debug, Default)]
struct Views {
    listing: u64,
    by_name: HashMap<String, (u64, core::Node)>,
}

/// The views kept between listings (see the module docs). Clones share them.
#[derive(Debug, Clone, Default)]
pub struct NodeViews {
    inner: Arc<Mutex<Views>>,
}

impl NodeViews {
    /// An empty set of views.
    pub fn new() -> Self {
        Self::default()
    }

    /// The core view of every Node of a complete listing, in the listing's order: reused when
    /// the Node did not change since the previous listing, converted otherwise. Views of Nodes
    /// this listing did not deliver are forgotten.
    pub fn view_all<'a>(&self, nodes: impl Iterator<Item = &'a Node>) -> Vec<core::Node> {
        let mut views = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let views = &mut *views;
        views.listing = views.listing.wrapping_add(1);
        let listing = views.listing;
        let out: Vec<core::Node> = nodes
            .map(|node| {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                let version = node
                    .metadata
                    .resource_version
                    .as_deref()
                    .unwrap_or_default();
                let uid = node.metadata.uid.as_deref().unwrap_or_default();
                match views.by_name.get_mut(name) {
                    Some((seen, view))
                        if !version.is_empty()
                            && view.resource_version == version
                            && view.uid == uid =>
                    {
                        *seen = listing;
                        view.clone()
                    }
                    _ => {
                        let view = node_to_core(node);
                        views
                            .by_name
                            .insert(name.to_owned(), (listing, view.clone()));
                        view
                    }
                }
            })
            .collect();
        views.by_name.retain(|_, (seen, _)| *seen == listing);
        out
    }

    /// How many views are kept.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_name
            .len()
    }

    /// Whether no view is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn node(name: &str, uid: &str, version: &str, zone: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                uid: Some(uid.to_owned()),
                resource_version: (!version.is_empty()).then(|| version.to_owned()),
                labels: Some(BTreeMap::from([
                    ("topology.kubernetes.io/zone".to_owned(), zone.to_owned()),
                    ("node.deckhouse.io/group".to_owned(), "workers".to_owned()),
                ])),
                annotations: Some(BTreeMap::from([(
                    "node.deckhouse.io/configuration-checksum".to_owned(),
                    "abc".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn an_unchanged_node_is_reused_and_shares_its_maps() {
        let views = NodeViews::new();
        let nodes = [node("a", "u1", "10", "z1"), node("b", "u2", "11", "z2")];
        let first = views.view_all(nodes.iter());
        let second = views.view_all(nodes.iter());
        assert_eq!(first, second);
        assert_eq!(
            first,
            nodes.iter().map(node_to_core).collect::<Vec<_>>(),
            "a kept view is what a conversion gives"
        );
        for (a, b) in first.iter().zip(&second) {
            assert!(a.labels.shares_with(&b.labels), "{}", a.name);
            assert!(a.annotations.shares_with(&b.annotations), "{}", a.name);
        }
    }

    #[test]
    fn a_changed_version_or_uid_is_converted_again() {
        let views = NodeViews::new();
        let first = views.view_all([node("a", "u1", "10", "z1")].iter());
        // Same name and version but a new object (deleted and created again).
        let recreated = views.view_all([node("a", "u9", "10", "z3")].iter());
        assert_eq!(recreated[0].zone(), Some("z3"));
        assert_eq!(recreated[0].uid, "u9");
        let changed = views.view_all([node("a", "u9", "12", "z2")].iter());
        assert_eq!(changed[0].zone(), Some("z2"));
        assert!(!first[0].labels.shares_with(&changed[0].labels));
    }

    #[test]
    fn a_node_without_a_version_is_always_converted() {
        let views = NodeViews::new();
        views.view_all([node("a", "u1", "", "z1")].iter());
        let again = views.view_all([node("a", "u1", "", "z2")].iter());
        assert_eq!(again[0].zone(), Some("z2"));
    }

    #[test]
    fn views_of_nodes_a_listing_did_not_deliver_are_forgotten() {
        let views = NodeViews::new();
        views.view_all([node("a", "u1", "1", "z1"), node("b", "u2", "2", "z1")].iter());
        assert_eq!(views.len(), 2);
        let listed = views.view_all([node("b", "u2", "2", "z1")].iter());
        assert_eq!(listed.len(), 1);
        assert_eq!(views.len(), 1);
        views.view_all(std::iter::empty());
        assert!(views.is_empty());
    }
}
