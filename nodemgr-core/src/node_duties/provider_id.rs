//! Which Static node gets a provider ID: a node labelled `node.deckhouse.io/type: Static` whose
//! `spec.providerID` is absent or empty gets `static://`, as Deckhouse does, so that tools keyed
//! on the provider ID (cloud controller managers, autoscalers) see every node as provisioned. A
//! provider ID that is set is never changed.

use crate::model::{Node, keys};

/// The provider ID nodemgr gives Static nodes.
pub const STATIC_PROVIDER_ID: &str = "static://";

/// The provider ID to set on `node`, if it is a Static node without one.
pub fn provider_id_to_set(node: &Node) -> Option<&'static str> {
    let is_static = node.labels.get(keys::LABEL_NODE_TYPE).map(String::as_str) == Some("Static");
    let has_id = node.provider_id.as_deref().is_some_and(|id| !id.is_empty());
    (is_static && !has_id).then_some(STATIC_PROVIDER_ID)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(node_type: Option<&str>, provider_id: Option<&str>) -> Node {
        let mut n = Node {
            provider_id: provider_id.map(str::to_owned),
            ..Node::default()
        };
        if let Some(t) = node_type {
            n.labels.insert(keys::LABEL_NODE_TYPE.into(), t.into());
        }
        n
    }

    #[test]
    fn only_static_nodes_without_an_id_get_one() {
        assert_eq!(
            provider_id_to_set(&node(Some("Static"), None)),
            Some("static://")
        );
        assert_eq!(
            provider_id_to_set(&node(Some("Static"), Some(""))),
            Some("static://")
        );
        assert_eq!(
            provider_id_to_set(&node(Some("Static"), Some("static://"))),
            None
        );
        assert_eq!(
            provider_id_to_set(&node(Some("Static"), Some("aws:///a/i-1"))),
            None
        );
        assert_eq!(provider_id_to_set(&node(Some("CloudStatic"), None)), None);
        assert_eq!(provider_id_to_set(&node(None, None)), None);
    }
}
